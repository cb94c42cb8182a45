"""The heartbeat of one running job, and the way a cancel requested on any driver reaches it."""

from __future__ import annotations

import logging
import threading

from app.core.jobstates import ACTIVE, JobStatus
from app.db.session import transaction, unavailable
from app.jobs.runtime import JobRuntime, RunningJob
from app.services import jobs

log = logging.getLogger("sparktrain.jobs")


class Watcher(threading.Thread):
    """Writes the job's heartbeat every ``heartbeat_interval_s`` while it runs here, and stops the job (its stop
    flag and its Spark job group) once the row says CANCELLING, ended, or names another driver or attempt: the
    cancel may have been requested on another driver, and the reconciler may have given the job up."""

    def __init__(self, rt: JobRuntime, running: RunningJob, attempt: int) -> None:
        super().__init__(name=f"job-watch-{running.job_id[:8]}", daemon=True)
        self._rt, self._running, self._attempt, self._halt = rt, running, attempt, threading.Event()

    def run(self) -> None:
        job_id = self._running.job_id
        away = False
        while True:
            try:
                with transaction(self._rt.db) as s:
                    status = jobs.heartbeat(
                        session=s, job_id=job_id, worker_id=self._rt.worker_id, attempt=self._attempt
                    )
                if away:
                    log.warning("job %s: the database is back; heartbeats resumed", job_id)
                    away = False
                if status is None and not self._running.cancel.is_set() and not self._rt.stopping:
                    log.warning("job %s attempt %d is no longer this driver's: stopping it", job_id, self._attempt)
                if status is None or status not in ACTIVE or status == JobStatus.CANCELLING:
                    self._running.cancel.set()
                    self._rt.cancel_group(self._running)  # at once, or after the job's grace (runtime.py)
            except Exception as exc:
                if not unavailable(exc):
                    log.exception("heartbeat of job %s failed", job_id)
                elif not away:  # one line per outage, not one traceback a second
                    log.warning("job %s: the database is away (%s); heartbeats wait for it", job_id, type(exc).__name__)
                    away = True
            if self._halt.wait(self._rt.settings.heartbeat_interval_s):
                return

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)
