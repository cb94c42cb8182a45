"""A JobContext (workers/context.py) for driver tests that run a family's driver on the real SparkSession without
the service: it keeps nothing and says nothing. A test subclasses it and overrides what it records."""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from workers.context import MetricPoint


class QuietContext:
    attempt = 1
    store: str | None = None
    cancelled = False

    def __init__(self, spark: Any, work_dir: Path, job_id: str = "driver-test") -> None:
        self.spark, self.work_dir, self.job_id = spark, work_dir, job_id

    def progress(self, fraction: float, message: str | None = None) -> None:
        assert 0 <= fraction <= 1, fraction

    def metrics(self, points: Iterable[MetricPoint]) -> None:
        pass

    def log(self, message: str, level: str = "INFO") -> None:
        pass

    def warn(self, message: str) -> None:
        pass

    def checkpoint(self, epoch: int, step: int, uri: str, metrics: dict[str, Any], **_: Any) -> str:
        return f"{epoch:032d}"

    def check_cancelled(self) -> None:
        return None

    def cancel_grace(self, seconds: float) -> Any:
        return nullcontext()
