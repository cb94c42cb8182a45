"""What a job consumer needs at hand: settings, the database, the process's SparkSession, its identity, and whether
the process was told to stop."""

from __future__ import annotations

import contextvars
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.orm import Session, sessionmaker

from app.core.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")
log = logging.getLogger("sparktrain.jobs")
Send = Callable[[str, str, str], None]
"""``send(task_name, job_id, queue)``: put a job's message on a queue."""


def make_worker_id() -> str:
    """host:pid:boot — unique per driver process start, so a restarted process is a new owner."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class DriverStopping(Exception):
    """A delivery reached a driver that is stopping: it takes nothing, and the message goes back to the broker."""


@dataclass
class RunningJob:
    job_id: str
    attempt: int = 1
    cancel: threading.Event = field(default_factory=threading.Event)
    handed_back: bool = False
    """The driver is stopping and gave this attempt back (DRIVER_STOPPED): its runner records nothing more."""
    grace_s: float = 0.0
    """How long a cancel lets the job stop by itself before its Spark job group is cancelled (the torch trainer's
    workers stop at their next step when told: ``JobContext.cancel_grace``); 0: at once."""
    cancel_seen_at: float | None = None
    group_cancel_timer: threading.Timer | None = None

    def group_cancel_due(self) -> bool:
        """Whether to cancel the Spark job group now: at once without a grace, else once the grace since the first
        cancel has passed."""
        now = time.monotonic()
        if self.cancel_seen_at is None:
            self.cancel_seen_at = now
        return now - self.cancel_seen_at >= self.grace_s


class RunningJobs:
    """The jobs this process runs now: lets the API cancel a local job at once, without waiting for the
    watcher to see the CANCELLING row, and a stopping driver hand every one back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, RunningJob] = {}
        self._takes = 0
        """Deliveries between their take's start and the job's registration here (or its hand-back)."""
        self._takes_done = threading.Condition(self._lock)
        self.stopping = threading.Event()

    def begin_take(self) -> bool:
        """A delivery is about to take its job (QUEUED -> STARTING): counted until :meth:`end_take`, so that a stop
        waits for it (:meth:`wait_for_takes`). False once the process is stopping: its message goes back."""
        with self._lock:
            if self.stopping.is_set():
                return False
            self._takes += 1
            return True

    def end_take(self) -> None:
        """The take that :meth:`begin_take` counted ended: its job is registered here, handed back, or not taken."""
        with self._lock:
            self._takes -= 1
            self._takes_done.notify_all()

    def wait_for_takes(self, timeout: float) -> bool:
        """After :meth:`stop`: wait up to ``timeout`` seconds for the takes in flight (each then finds the process
        stopping and hands its job back itself); returns whether none is left."""
        with self._lock:
            return self._takes_done.wait_for(lambda: self._takes == 0, timeout)

    def add(self, job_id: str, attempt: int = 1) -> RunningJob | None:
        """The job as running here; None once the process is stopping (the caller hands it back)."""
        with self._lock:
            if self.stopping.is_set():
                return None
            running = self._jobs[job_id] = RunningJob(job_id, attempt)
            return running

    def stop(self) -> list[RunningJob]:
        """From now on :meth:`add` refuses; returns the jobs running at this moment (each one exactly once)."""
        with self._lock:
            first = not self.stopping.is_set()
            self.stopping.set()
            return list(self._jobs.values()) if first else []

    def remove(self, running: RunningJob) -> None:
        """Forget ``running`` (not a later attempt of its job that this process took since: the reconciler may have
        given the earlier one up while it still ran here)."""
        with self._lock:
            if self._jobs.get(running.job_id) is running:
                del self._jobs[running.job_id]

    def get(self, job_id: str) -> RunningJob | None:
        with self._lock:
            return self._jobs.get(job_id)

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._jobs)


class DetachedRuns:
    """Job runs that go on after their delivery ended, each on a thread of its own (tune jobs: app/jobs/runner.py),
    so that the process can wait for them when it stops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[threading.Thread, str] = {}
        """By thread: an attempt handed back may still unwind while the job's next one runs here."""

    def start(self, job_id: str, work: Callable[[], None]) -> None:
        context = contextvars.copy_context()  # the job's log scope goes with it

        def run() -> None:
            try:
                context.run(work)
            except Exception:
                log.exception("job %s: its run ended with an error", job_id)
            finally:
                with self._lock:
                    self._threads.pop(thread, None)

        thread = threading.Thread(target=run, name=f"job-{job_id[:8]}", daemon=True)
        with self._lock:
            self._threads[thread] = job_id
        thread.start()

    def join(self, timeout: float) -> list[str]:
        """Wait up to ``timeout`` seconds in all for the runs to end; returns the jobs still running."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads.items())
        for thread, _ in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [job_id for thread, job_id in threads if thread.is_alive()]


@dataclass
class JobRuntime:
    settings: Settings
    db: sessionmaker[Session]
    spark: SparkSession
    worker_id: str = field(default_factory=make_worker_id)
    running: RunningJobs = field(default_factory=RunningJobs)
    send: Send | None = None
    """Sends retries and woken jobs; set once the process's Celery app is attached."""
    detached: DetachedRuns = field(default_factory=DetachedRuns)
    """Runs that left their consumer thread (tune jobs)."""

    @property
    def stopping(self) -> bool:
        return self.running.stopping.is_set()

    def write(
        self,
        work: Callable[[Any], T],
        what: str = "",
        *,
        begin: Callable[[], AbstractContextManager[Any]] | None = None,
        budget_s: float | None = None,
    ) -> T:
        """A write of the job runner: retried while the database is away, for up to ``budget_s`` (default
        ``db_retry_s``; ``begin``: see app.db.session.retrying)."""
        from app.db.session import retrying

        budget = self.settings.db_retry_s if budget_s is None else budget_s
        return retrying(self.db, work, budget_s=budget, what=what, begin=begin)

    def cancel_local(self, job_id: str) -> bool:
        """Stop a job this process runs: set its stop flag and cancel its Spark job group. False if not here."""
        running = self.running.get(job_id)
        if running is None:
            return False
        running.cancel.set()
        self.cancel_group(running)
        return True

    def cancel_group(self, running: RunningJob) -> None:
        """Cancel a cancelled job's Spark job group: now, or (one timer per job) when its grace has passed and it
        still runs. The API's cancel and the job's watcher both come here. Not an attempt that a later one of its
        job replaced here (the reconciler gave it up while it still ran): the group, the job's id, is theirs both."""
        if self.running.get(running.job_id) is not running:
            return
        if running.group_cancel_due():
            spark_call(lambda: self.spark.sparkContext.cancelJobGroup(running.job_id))
            return
        if running.group_cancel_timer is not None:
            return

        def later() -> None:
            if self.running.get(running.job_id) is running:
                spark_call(lambda: self.spark.sparkContext.cancelJobGroup(running.job_id))

        running.group_cancel_timer = threading.Timer(running.grace_s, later)
        running.group_cancel_timer.daemon = True
        running.group_cancel_timer.start()


def spark_call(call: Callable[[], T]) -> T | None:
    """A call into the JVM that may find Spark already gone (the JVM got the stop signal too, or died): None then,
    and nothing logged. Anything else it raises is raised."""
    try:
        return call()
    except Exception as exc:
        if spark_gone_error(exc):
            return None
        raise


def spark_gone_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the JVM or the SparkContext is gone rather than that a Spark job failed."""
    if type(exc).__module__.startswith("py4j") and type(exc).__name__ in ("Py4JNetworkError", "Py4JError"):
        return True
    if isinstance(exc, ConnectionError | EOFError):
        return True
    try:
        text = str(exc)
    except Exception:  # a Java exception whose text the JVM can no longer give
        return True
    if isinstance(exc, AttributeError):
        return "'NoneType' object has no attribute" in text  # SparkContext.stop() cleared _jsc under us
    return any(sign in text for sign in _GONE)


_GONE = (
    "SparkContext has been shutdown",
    "SparkContext was shut down",
    "Cannot call methods on a stopped SparkContext",
    "Answer from Java side is empty",
    "Error while sending or receiving",
)
