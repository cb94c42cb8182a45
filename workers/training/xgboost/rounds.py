"""The driver's end of an xgboost fit's round reports: each boosting round's evaluation as job metrics, and the
rounds done as the job's progress, while the fit runs.

Rank 0's training callback (remote.py :func:`~workers.training.xgboost.remote.round_callback`) sends every round's
evaluation as the round ends, newline-delimited JSON over TCP after a hello with a random token, the wire of
workers/training/torch/report.py. :class:`RoundReports` listens, and writes what arrives as job metrics
(``validation_<metric>``, ``train_<metric>``; step = the round) every half second, so ``GET /jobs/{id}/metrics``
shows them while the fit runs and a tune job can prune the trial before it ends.

It remembers which (key, round) it wrote: the history the fit hands back at its end adds only the rounds that did
not arrive (:meth:`RoundReports.missing`), and a round sent twice (a stage attempt run again) is written once.

The same reports move the job's progress: after each flush, the newest round heard of out of ``num_round``, scaled
into the fit's share of the bar (:func:`round_progress`, "training: round 120 of 500"). Round numbers count the
rounds of a checkpoint the fit continued from, so a resumed job starts where its checkpoint left off; progress never
goes back (a stage attempt run again sends its rounds again: those are not shown twice).

Driver side: stdlib only.
"""

from __future__ import annotations

import logging
import threading
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


def round_progress(done: int, num_round: int, low: float, high: float) -> tuple[float, str]:
    """The job's progress after ``done`` of ``num_round`` rounds, within ``[low, high]``, and its message."""
    total = max(num_round, 1)
    done = min(max(done, 0), total)
    return low + (high - low) * done / total, f"training: round {done} of {total}"


class RoundReports(EventListener):
    """While open: writes each round's evaluation as job metrics and shows the rounds done as the job's progress,
    between ``low`` and ``high``; ``resumed``: the rounds of the checkpoint the fit continues from."""

    name = "xgboost round reports"

    def __init__(
        self, ctx: JobContext, host: str, *, num_round: int, resumed: int = 0, low: float = 0.0, high: float = 1.0
    ) -> None:
        super().__init__(host, FLUSH_S)
        self._ctx = ctx
        self._pending: dict[Key, MetricPoint] = {}
        self._claimed: set[Key] = set()  # pending or written
        self._written: set[Key] = set()
        self._num_round, self._low, self._high = num_round, low, high
        self._round = resumed  # the newest round heard of
        self._shown = -1  # the round the job's progress shows
        self._showing = threading.Lock()  # one progress write at a time, so that a later round is never overwritten
        self.target: ReportTarget = (*self.address, self.token)

    def __enter__(self) -> RoundReports:
        self._show_progress()  # the checkpoint's rounds (or none) until the first round ends
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        # after a fit that ended well rank 0 closed its socket: read what it sent last
        self.close(drain=kind is None, drain_s=DRAIN_S)
        self._flush()
        self._show_progress()

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
            self._round = max(self._round, step)
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

    def _show_progress(self) -> None:
        """The newest round as the job's progress, after its metrics were written (flushed first)."""
        with self._showing:
            with self._lock:
                done = self._round
            if done <= self._shown:
                return
            fraction, message = round_progress(done, self._num_round, self._low, self._high)
            try:
                self._ctx.progress(fraction, message)
            except Exception as exc:  # the database is away: the next flush shows a newer round
                log.warning("job %s: recording progress failed (%s: %s)", self._ctx.job_id, type(exc).__name__, exc)
                return
            self._shown = done

    def _tick(self) -> None:
        self._flush()
        self._show_progress()
