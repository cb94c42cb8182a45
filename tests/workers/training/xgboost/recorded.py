"""What the xgboost round-report tests share: the part of a JobContext the listener writes to, kept in lists."""

from __future__ import annotations

from collections.abc import Iterable

from workers.context import MetricPoint


class Recorded:
    """The part of a JobContext the listener writes to: metric points and (progress, message) pairs, in lists."""

    job_id = "test-job"

    def __init__(self) -> None:
        self.points: list[MetricPoint] = []
        self.shown: list[tuple[float, str | None]] = []

    def metrics(self, points: Iterable[MetricPoint]) -> None:
        self.points.extend(points)

    def progress(self, fraction: float, message: str | None = None) -> None:
        self.shown.append((fraction, message))
