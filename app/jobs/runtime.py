"""What a job consumer needs at hand: settings, the database, the process's SparkSession, its identity."""

from __future__ import annotations

import os
import socket
import threading
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, sessionmaker

from app.core.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def make_worker_id() -> str:
    """host:pid:boot — unique per driver process start, so a restarted process is a new owner."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class RunningJob:
    job_id: str
    cancel: threading.Event = field(default_factory=threading.Event)


class RunningJobs:
    """The jobs this process runs now: lets the API cancel a local job at once, without waiting for the
    watcher to see the CANCELLING row."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, RunningJob] = {}

    def add(self, job_id: str) -> RunningJob:
        with self._lock:
            running = self._jobs[job_id] = RunningJob(job_id)
            return running

    def remove(self, job_id: str) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)

    def get(self, job_id: str) -> RunningJob | None:
        with self._lock:
            return self._jobs.get(job_id)

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._jobs)


@dataclass
class JobRuntime:
    settings: Settings
    db: sessionmaker[Session]
    spark: SparkSession
    worker_id: str = field(default_factory=make_worker_id)
    running: RunningJobs = field(default_factory=RunningJobs)

    def cancel_local(self, job_id: str) -> bool:
        """Stop a job this process runs: set its stop flag and cancel its Spark job group. False if not here."""
        running = self.running.get(job_id)
        if running is None:
            return False
        running.cancel.set()
        self.spark.sparkContext.cancelJobGroup(job_id)
        return True
