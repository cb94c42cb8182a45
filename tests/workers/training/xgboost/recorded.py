"""What the xgboost round-report tests share: the part of a JobContext the listener writes to, kept in a list."""

from __future__ import annotations

from collections.abc import Iterable

from workers.context import MetricPoint


class Recorded:
    """The part of a JobContext the listener writes to, kept in a list."""

    job_id = "test-job"

    def __init__(self) -> None:
        self.points: list[MetricPoint] = []

    def metrics(self, points: Iterable[MetricPoint]) -> None:
        self.points.extend(points)
