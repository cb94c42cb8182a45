"""The :class:`~workers.context.JobContext` a family driver reports through, backed by the job database.

Every report is a short committed transaction, tried again while the database is away (a PostgreSQL restart must
not fail a job that is training; ``SPARKTRAIN_DB_RETRY_S``). Checkpoints are recorded only while the job is still
this runner's (its row names this driver and attempt): a runner whose job was given up records nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.jobstates import ACTIVE
from app.db.models import Job
from app.jobs.runtime import JobRuntime, RunningJob
from app.services import checkpoints, jobs
from workers import storage
from workers.context import JobCancelled, MetricPoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("sparktrain.jobs")


class DbJobContext:
    """The JobContext a family driver sees; every report is a short committed transaction."""

    def __init__(self, rt: JobRuntime, job_id: str, attempt: int, running: RunningJob, work_dir: Path) -> None:
        self._rt = rt
        self._running = running
        self._last_progress = 0.0
        # One writer of metric points and log lines at a time (the trainer's monitor writes from several threads):
        # their ids then commit in order, which the event stream (GET /jobs/{id}/events) follows by id.
        self._write_lock = threading.Lock()
        self.job_id = job_id
        self.attempt = attempt
        self.owner = {"worker_id": rt.worker_id, "attempt": attempt}
        self.spark: SparkSession = rt.spark
        self.work_dir = work_dir
        self.store = rt.settings.artifact_store or None

    def progress(self, fraction: float, message: str | None = None) -> None:
        now = time.monotonic()
        if fraction < 1.0 and message is None and now - self._last_progress < 0.25:
            return
        self._last_progress = now
        self._rt.write(
            lambda s: jobs.set_progress(
                session=s,
                job_id=self.job_id,
                fraction=fraction,
                message=message,
                worker_id=self._rt.worker_id,
                attempt=self.attempt,
            ),
            "recording progress",
        )

    def metrics(self, points: Iterable[MetricPoint]) -> None:
        rows = [{"key": p.key, "value": p.value, "step": p.step, "epoch": p.epoch, "worker": p.worker} for p in points]

        def record(s: Session) -> None:
            # an attempt handed back (a stop) or taken for lost writes nothing more: the next attempt writes its
            # steps from where it continues, once (forget_metrics_after)
            if self._owned(s, lock=False) is not False:
                jobs.add_metrics(session=s, job_id=self.job_id, points=rows)

        if rows:
            self._in_order(record, "recording metrics")

    def forget_metrics_after(self, checkpoint_id: str | None) -> None:
        """A retried attempt's start: its points past where it continues (all of them, from scratch) go, unless the
        job is no longer this attempt's (it was taken for lost meanwhile: the next attempt's points stay)."""

        def forget(s: Session) -> None:
            if self._owned(s) is True:
                checkpoints.forget_metrics_after(session=s, job_id=self.job_id, checkpoint_id=checkpoint_id,
                                                 attempt=self.attempt)  # fmt: skip

        self._in_order(forget)

    def log(self, message: str, level: str = "INFO") -> None:
        log.log(logging.getLevelName(level), "[job %s] %s", self.job_id, message, extra={"job_id": self.job_id})

        def record(s: Session) -> None:
            # a line of an attempt that no longer runs the job (handed back, or taken for lost) says so: its
            # "epoch 33 done" read as the job's, before the next attempt's own
            stale = self._owned(s, lock=False) is False
            said = f"(attempt {self.attempt}, no longer running this job) {message}" if stale else message
            jobs.add_log(session=s, job_id=self.job_id, message=said, level=level)

        self._in_order(record)

    def _in_order(self, work: Callable[[Session], object], what: str = "") -> None:
        """One write at a time, so that ids commit in order. The database-away budget counts from the call, not
        from when the lock is won: threads queued behind a write that retries for ``db_retry_s`` then give up
        with it instead of each retrying for another ``db_retry_s`` in turn."""
        deadline = time.monotonic() + self._rt.settings.db_retry_s
        with self._write_lock:
            self._rt.write(work, what, budget_s=max(0.0, deadline - time.monotonic()))

    def warn(self, message: str) -> None:
        self.log(message, "WARNING")

        def record(s: Session) -> None:
            if self._owned(s, lock=False) is not False:  # a former attempt's warning is in its log line only
                jobs.add_warning(session=s, job_id=self.job_id, message=message)

        self._rt.write(record)

    def checkpoint(
        self, epoch: int, step: int, uri: str, metrics: dict[str, Any], *, keep_epoch: int | None = None
    ) -> str:
        """The checkpoint's id. A runner whose job is no longer its own records nothing: JobCancelled, or, once its
        driver handed the job back on a stop, quietly "" (the stop is no error of the job's)."""

        def record(s: Session) -> tuple[str, list[str]]:
            owned = self._owned(s)
            if owned == "finished":
                return "", []  # a late report of an attempt that ended here: nothing to resume any more
            if not owned:
                self._running.cancel.set()
                if self._running.handed_back or self._rt.stopping:
                    return "", []
                raise JobCancelled(f"{self.job_id}: no longer this runner's; checkpoint of epoch {epoch} dropped")
            row = checkpoints.record(
                session=s, job_id=self.job_id, attempt=self.attempt, epoch=epoch, step=step, uri=uri, metrics=metrics
            )
            keep = self._rt.settings.checkpoint_retention
            return row.id, checkpoints.prune(session=s, job_id=self.job_id, keep=keep, keep_epoch=keep_epoch)

        checkpoint_id, stale = self._rt.write(record, f"recording checkpoint {epoch}")
        for old in stale:  # the rows are gone; now their files
            storage.discard_dir(old)  # a kill in the middle leaves no half checkpoint under its name
        return checkpoint_id

    def _owned(self, session: Any, *, lock: bool = True) -> bool | str:
        """Whether the job still runs here (with ``lock``, the row locked until the end of ``session``'s
        transaction); "finished" when this very attempt already ended it."""
        stmt = select(Job.worker_id, Job.attempt, Job.status).where(Job.id == self.job_id)
        job = session.execute(stmt.with_for_update() if lock else stmt).one_or_none()
        if job is None or (job.worker_id, job.attempt) != (self._rt.worker_id, self.attempt):
            return False
        return True if job.status in ACTIVE else "finished"

    @property
    def running(self) -> RunningJob:
        return self._running

    @property
    def cancelled(self) -> bool:
        return self._running.cancel.is_set()

    def check_cancelled(self) -> None:
        if self.cancelled:
            raise JobCancelled(self.job_id)

    @contextmanager
    def cancel_grace(self, seconds: float) -> Iterator[None]:
        self._running.grace_s = seconds
        try:
            yield
        finally:
            self._running.grace_s = 0.0
