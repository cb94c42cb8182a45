"""py4j's complaint about a broken connection is dropped only when the JVM is gone (tests/e2e/test_spark_lost.py kills
it): while the JVM runs it is a fault of its own, and it is logged as py4j logs it."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import py4j.java_gateway
from py4j.protocol import Py4JNetworkError

from app.core.logging import configure_logging
from app.spark.jvm_watch import JVM_DIED, jvm_exited, watch_jvm_death


def test_a_broken_connection_to_a_live_jvm_is_still_logged(spark: Any) -> None:
    watch_jvm_death()
    stream = io.StringIO()
    handler = configure_logging(level="INFO", fmt="text", stream=stream)
    try:
        error = Py4JNetworkError("Answer from Java side is empty")
        record = logging.getLogger().makeRecord(
            "root", logging.INFO, str(Path(py4j.java_gateway.__file__)), 1038, "Exception while sending command.",
            (), (Py4JNetworkError, error, None),
        )  # fmt: skip
        logging.getLogger().handle(record)
    finally:
        logging.getLogger().removeHandler(handler)
    assert not jvm_exited() and not JVM_DIED.is_set()
    assert "Exception while sending command." in stream.getvalue() and "Py4JNetworkError" in stream.getvalue()
