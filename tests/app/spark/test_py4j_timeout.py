"""A py4j connection opened while kombu had set the process's default socket timeout to 0.1 s (its
``Connection.collect``) kept that timeout, and every Spark call on it longer than 0.1 s failed: a job of the test
suite failed with ``Py4JError: An error occurred while calling o403.load`` (app/spark/session.py)."""

from __future__ import annotations

import socket
import threading
from typing import Any


def test_a_connection_opened_under_a_short_default_timeout_still_blocks(spark: Any) -> None:
    jvm = spark.sparkContext._jvm
    outcome: list[Any] = []

    def call() -> None:  # a new thread: py4j opens a new connection for it
        previous = socket.getdefaulttimeout()
        socket.setdefaulttimeout(0.1)  # what kombu's Connection.collect(0.1) does for a moment
        try:
            jvm.java.lang.System.nanoTime()  # the connection is made here
        finally:
            socket.setdefaulttimeout(previous)
        try:
            jvm.java.lang.Thread.sleep(400)  # a call longer than 0.1 s on that connection
            outcome.append("ok")
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join(30)
    assert outcome == ["ok"], outcome
