"""The driver's end of an xgboost fit's round reports: each boosting round's evaluation, as job metrics while it runs.

Rank 0's training callback (remote.py :func:`~workers.training.xgboost.remote.round_callback`) sends every round's
evaluation as the round ends, newline-delimited JSON over TCP after a hello with a random token, the wire of
workers/training/torch/report.py. :class:`RoundReports` listens, and writes what arrives as job metrics
(``validation_<metric>``, ``train_<metric>``; step = the round) every half second, so ``GET /jobs/{id}/metrics``
shows them while the fit runs and a tune job can prune the trial before it ends.

It remembers which (key, round) it wrote: the history the fit hands back at its end adds only the rounds that did
not arrive (:meth:`RoundReports.missing`), and a round sent twice (a stage attempt run again) is written once.

Driver side: stdlib only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from workers.context import JobContext, MetricPoint
from workers.training.listener import EventListener
from workers.training.xgboost.remote import ReportTarget

log = logging.getLogger(__name__)
FLUSH_S = 0.5
DRAIN_S = 30.0
"""After a fit that ended well, how long to wait for the events rank 0 sent last (it closed its socket)."""

Key = tuple[str, int]


class RoundReports(EventListener):
    name = "xgboost round reports"

    def __init__(self, ctx: JobContext, host: str) -> None:
        super().__init__(host, FLUSH_S)
        self._ctx = ctx
        self._pending: dict[Key, MetricPoint] = {}
        self._claimed: set[Key] = set()  # pending or written
        self._written: set[Key] = set()
        self.target: ReportTarget = (*self.address, self.token)

    def __enter__(self) -> RoundReports:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        # after a fit that ended well rank 0 closed its socket: read what it sent last
        self.close(drain=kind is None, drain_s=DRAIN_S)
        self._flush()

    def missing(self, points: Iterable[MetricPoint]) -> list[MetricPoint]:
        """``points`` less the (key, step) pairs already written, each once."""
        out: dict[Key, MetricPoint] = {}
        with self._lock:
            for p in points:
                if (p.key, p.step) not in self._written:
                    out.setdefault((p.key, p.step), p)
        return list(out.values())

    def _handle(self, event: dict[str, Any]) -> None:
        if event.get("t") != "round":
            return
        step = int(event["round"])
        with self._lock:
            for key, value in (event.get("metrics") or {}).items():
                if (key, step) not in self._claimed:
                    self._claimed.add((key, step))
                    self._pending[key, step] = MetricPoint(str(key), float(value), step=step)

    def _flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return
        try:
            self._ctx.metrics(sorted(pending.values(), key=lambda p: (p.step, p.key)))
        except Exception as exc:  # the database is away: tried again on the next flush, else written at the end
            log.warning("job %s: writing %d round metrics failed (%s: %s)", self._ctx.job_id, len(pending),
                        type(exc).__name__, exc)  # fmt: skip
            with self._lock:
                self._pending = {**pending, **self._pending}
            return
        with self._lock:
            self._written.update(pending)

    def _tick(self) -> None:
        self._flush()
