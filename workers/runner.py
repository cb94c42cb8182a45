"""Runs one job for a Celery task: the guarded start, the Spark job group, heartbeats, the family's work, and
exactly one final state (DESIGN.md §3).

A runner owns its job while the row names its driver (``worker_id``) and its attempt. Everything it records
after the start (checkpoints, progress, the final state, the model version) is conditional on that, so a runner
whose job was given up by the reconciler (its heartbeats stalled; another driver may run the next attempt now)
stops and records nothing: one job never has two writers.

When Spark loses a worker of a torch training job's barrier stage (a Python worker or an executor died: the
stage fails at once, and Spark does not retry a failed barrier result stage), the attempt ends as WORKER_LOST and
the job is queued again from its newest checkpoint, like a job whose driver died (app/services/reconcile.py).
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.errors import AppError
from app.core.jobstates import ACTIVE, JobStatus
from app.db.base import utcnow
from app.db.models import Job
from app.db.session import transaction
from app.schemas.inference import EvaluateRequest, PredictRequest
from app.schemas.train import TrainRequest
from app.services import checkpoints, jobs, models, reconcile
from app.services.inference import plan_evaluation, plan_prediction
from app.services.training import plan_training
from workers import storage
from workers.context import JobCancelled, JobFailure, JobOutcome, MetricPoint
from workers.families import DRIVERS, RECIPES
from workers.runtime import JobRuntime, RunningJob

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("sparktrain.jobs")
_MAX_MESSAGE = 4000
Send = Callable[[str, str, str], None]
"""``send(task_name, job_id, queue)``: put a job's message on a queue (for retries)."""
# What Spark says when a task's Python worker or executor died (and what gloo says on the surviving ranks)
_WORKER_LOST = (
    "Python worker exited unexpectedly",
    "ExecutorLostFailure",
    "Executor lost",
    "Connection closed by peer",
    "Connection reset by peer",
)


class DbJobContext:
    """The JobContext a family driver sees; every report is a short committed transaction."""

    def __init__(self, rt: JobRuntime, job_id: str, attempt: int, running: RunningJob, work_dir: Path) -> None:
        self._rt = rt
        self._running = running
        self._last_progress = 0.0
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
        with transaction(self._rt.db) as s:
            jobs.set_progress(
                session=s, job_id=self.job_id, fraction=fraction, message=message, worker_id=self._rt.worker_id
            )

    def metrics(self, points: Iterable[MetricPoint]) -> None:
        rows = [{"key": p.key, "value": p.value, "step": p.step, "epoch": p.epoch, "worker": p.worker} for p in points]
        if rows:
            with transaction(self._rt.db) as s:
                jobs.add_metrics(session=s, job_id=self.job_id, points=rows)

    def log(self, message: str, level: str = "INFO") -> None:
        log.log(logging.getLevelName(level), "[job %s] %s", self.job_id, message)
        with transaction(self._rt.db) as s:
            jobs.add_log(session=s, job_id=self.job_id, message=message, level=level)

    def warn(self, message: str) -> None:
        self.log(message, "WARNING")
        with transaction(self._rt.db) as s:
            jobs.add_warning(session=s, job_id=self.job_id, message=message)

    def checkpoint(self, epoch: int, step: int, uri: str, metrics: dict[str, Any]) -> str:
        with transaction(self._rt.db) as s:
            if not self._owned(s):
                self._running.cancel.set()
                raise JobCancelled(f"{self.job_id}: no longer this runner's; checkpoint of epoch {epoch} dropped")
            row = checkpoints.record(
                session=s, job_id=self.job_id, attempt=self.attempt, epoch=epoch, step=step, uri=uri, metrics=metrics
            )
            checkpoint_id = row.id
            stale = checkpoints.prune(session=s, job_id=self.job_id, keep=self._rt.settings.checkpoint_retention)
        for old in stale:  # the rows are gone; now their files
            _remove_checkpoint(old)
        return checkpoint_id

    def _owned(self, session: Any) -> bool:
        """Whether the job still runs here (the row locked until the end of ``session``'s transaction)."""
        job = session.get(Job, self.job_id, with_for_update=True, populate_existing=True)
        return bool(
            job is not None
            and job.status in ACTIVE
            and job.worker_id == self._rt.worker_id
            and job.attempt == self.attempt
        )

    @property
    def cancelled(self) -> bool:
        return self._running.cancel.is_set()

    def check_cancelled(self) -> None:
        if self.cancelled:
            raise JobCancelled(self.job_id)


def _remove_checkpoint(uri: str) -> None:
    """A local directory is renamed aside before it is deleted, so that a kill in the middle never leaves a
    half-deleted directory under a checkpoint's name (as workers/training/torch/checkpoint.py promises)."""
    if storage.is_remote(uri):
        storage.remove_dir(uri)
        return
    path = storage.local_path(uri)
    aside = path.with_name(f"{path.name}.old-{uuid.uuid4().hex[:8]}")
    try:
        os.replace(path, aside)
    except FileNotFoundError:
        return
    shutil.rmtree(aside, ignore_errors=True)


class _Watcher(threading.Thread):
    """Heartbeat + cancel detection for one job: the cancel may have been requested on another driver."""

    def __init__(self, rt: JobRuntime, running: RunningJob, attempt: int) -> None:
        super().__init__(name=f"job-watch-{running.job_id[:8]}", daemon=True)
        self._rt, self._running, self._attempt, self._halt = rt, running, attempt, threading.Event()

    def run(self) -> None:
        job_id = self._running.job_id
        while True:
            try:
                with transaction(self._rt.db) as s:
                    status = jobs.heartbeat(
                        session=s, job_id=job_id, worker_id=self._rt.worker_id, attempt=self._attempt
                    )
                if status is None and not self._running.cancel.is_set():
                    log.warning("job %s attempt %d is no longer this driver's: stopping it", job_id, self._attempt)
                if status is None or status not in ACTIVE or status == JobStatus.CANCELLING:
                    self._running.cancel.set()
                    self._rt.spark.sparkContext.cancelJobGroup(self._running.job_id)
            except Exception:
                log.exception("heartbeat of job %s failed", self._running.job_id)
            if self._halt.wait(self._rt.settings.heartbeat_interval_s):
                return

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)


def run_job(rt: JobRuntime, job_id: str, *, queue: str | None = None, send: Send | None = None) -> None:
    """Entry point of every job task. A delivery that does not win QUEUED -> STARTING does nothing. ``queue`` is
    the queue the message came from (recorded on the job, where its retries go); ``send`` queues a retry."""
    with transaction(rt.db) as s:
        won = jobs.transition(
            session=s,
            job_id=job_id,
            sources=[JobStatus.QUEUED],
            target=JobStatus.STARTING,
            worker_id=rt.worker_id,
            started_at=utcnow(),
            heartbeat_at=utcnow(),
            spark_app_id=rt.spark.sparkContext.applicationId,
        )
        if won:
            job = jobs.get_job(session=s, job_id=job_id)
            job.attempts = jobs.update_attempt(job, job.attempt, queue=queue or rt.settings.queue)
            job_type, framework, name, request, attempt = job.type, job.framework, job.name, job.request, job.attempt
    if not won:
        _ignore_delivery(rt, job_id)
        return
    running = rt.running.add(job_id)
    watcher = _Watcher(rt, running, attempt)
    sc = rt.spark.sparkContext
    sc.setJobGroup(job_id, f"sparktrain {job_type} job {job_id}", interruptOnCancel=True)
    work_dir = rt.settings.artifact_root / "jobs" / job_id
    work_dir.mkdir(parents=True, exist_ok=True)
    ctx = DbJobContext(rt, job_id, attempt, running, work_dir)
    watcher.start()
    try:
        ctx.log(f"attempt {attempt} started on {rt.worker_id} (Spark application {sc.applicationId})")
        with transaction(rt.db) as s:
            jobs.transition(session=s, job_id=job_id, sources=[JobStatus.STARTING], target=JobStatus.RUNNING,
                            only_if=ctx.owner)  # fmt: skip
        ctx.check_cancelled()
        outcome = _execute(rt, ctx, job_type, framework, request, name=name)
    except BaseException as exc:
        _drain_job_group(rt, job_id)
        _settle(rt, ctx, exc, send)
        if not isinstance(exc, Exception):
            raise
    else:
        _settle(rt, ctx, outcome, send)
    finally:
        watcher.stop()
        rt.running.remove(job_id)
        sc._jsc.clearJobGroup()


def _drain_job_group(rt: JobRuntime, job_id: str, quiet_s: float = 2.0, limit_s: float = 60.0) -> None:
    """After a job ends badly, threads it started (Spark ML's CrossValidator pool keeps fitting after an error)
    may still submit Spark jobs in its group: cancel the group until it has been quiet for ``quiet_s``."""
    sc = rt.spark.sparkContext
    tracker = sc.statusTracker()
    deadline = time.monotonic() + limit_s
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        active = set(tracker.getActiveJobsIds()) & set(tracker.getJobIdsForGroup(job_id))
        if active:
            sc.cancelJobGroup(job_id)
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return
        time.sleep(0.1)
    log.warning("job %s: its Spark job group was still busy after %.0f s", job_id, limit_s)


def _settle(rt: JobRuntime, ctx: DbJobContext, ended: JobOutcome | BaseException, send: Send | None) -> None:
    """Write the one final state (if the job is still this runner's). A bug in writing it must not leave the job
    looking alive."""
    try:
        if isinstance(ended, JobOutcome):
            _finish_succeeded(rt, ctx, ended)
        elif ctx.cancelled:
            _finish_cancelled(rt, ctx, ended)
        else:
            _finish_failed(rt, ctx, ended, send)
    except Exception as exc:
        taken = isinstance(exc, models.ModelNameTaken)
        if not taken:
            log.exception("could not record the end of job %s", ctx.job_id)
        with transaction(rt.db) as s:
            jobs.transition(
                session=s,
                job_id=ctx.job_id,
                sources=[JobStatus.STARTING, JobStatus.RUNNING, JobStatus.CANCELLING],
                target=JobStatus.FAILED,
                only_if=ctx.owner,
                finished_at=utcnow(),
                error_reason="MODEL_NAME_TAKEN" if taken else "INTERNAL",
                error_message=(str(exc) if taken else f"recording the result failed: {type(exc).__name__}: {exc}")[
                    :_MAX_MESSAGE
                ],
            )


def _ignore_delivery(rt: JobRuntime, job_id: str) -> None:
    with transaction(rt.db) as s:
        job = s.get(Job, job_id)
        if job is None:
            log.warning("message for unknown job %s dropped", job_id)
            return
        status = job.status
        jobs.add_log(
            session=s,
            job_id=job_id,
            level="WARNING",
            message=f"a delivery of this job reached {rt.worker_id} while it was {status}: ignored",
        )
    log.info("job %s is %s: duplicate delivery ignored", job_id, status)


def _execute(
    rt: JobRuntime,
    ctx: DbJobContext,
    job_type: str,
    framework: str | None,
    request: dict[str, Any],
    *,
    name: str | None = None,
) -> Any:
    if job_type == "recipe":
        if name not in RECIPES:
            raise JobFailure("UNSUPPORTED", f"no recipe named {name!r}")
        ctx.progress(0.0, f"starting the {name} recipe")
        return importlib.import_module(RECIPES[name]).run(ctx, request)
    ctx.progress(0.0, "checking the request against the data")
    if job_type == "train":
        if framework not in DRIVERS:
            raise JobFailure("UNSUPPORTED", f"no runner for training {framework!r} models")
        plan = plan_training(
            request=TrainRequest.model_validate(request), settings=rt.settings, spark=rt.spark, db=rt.db
        )
        driver = importlib.import_module(DRIVERS[framework])
        return driver.train(ctx, plan)
    if job_type == "evaluate":
        from workers.evaluation.driver import evaluate

        evaluation = plan_evaluation(
            request=EvaluateRequest.model_validate(request), settings=rt.settings, spark=rt.spark, db=rt.db
        )
        return evaluate(ctx, evaluation)
    if job_type == "predict":
        from workers.inference.batch import predict

        prediction = plan_prediction(
            request=PredictRequest.model_validate(request), settings=rt.settings, spark=rt.spark, db=rt.db
        )
        return predict(ctx, prediction)
    raise JobFailure("UNSUPPORTED", f"no runner for {job_type} jobs")


class _NoLongerOurs(Exception):
    """The job left RUNNING/CANCELLING under us (e.g. the reconciler failed it): roll the result back."""


def _finish_succeeded(rt: JobRuntime, ctx: DbJobContext, outcome: JobOutcome) -> None:
    try:
        _commit_success(rt, ctx, outcome)
    except _NoLongerOurs:
        log.warning("job %s finished but is no longer running here; result discarded", ctx.job_id)


def _commit_success(rt: JobRuntime, ctx: DbJobContext, outcome: JobOutcome) -> None:
    """SUCCEEDED (from CANCELLING with a warning: the cancel came too late) and the model version, in one
    transaction. The guarded transition comes first, so a runner that no longer owns the job writes nothing."""
    with transaction(rt.db) as s:
        job = jobs.get_job(session=s, job_id=ctx.job_id)
        name, owner, warnings = job.name, job.owner, list(job.warnings or [])
        values: dict[str, Any] = {"result": outcome.result, "finished_at": utcnow(), "progress": 1.0}
        late = [*warnings, "the cancel arrived after the work had finished"]
        won = any(
            jobs.transition(
                session=s,
                job_id=ctx.job_id,
                sources=[source],
                target=JobStatus.SUCCEEDED,
                only_if=ctx.owner,
                **values,
                **extra,
            )
            for source, extra in ((JobStatus.CANCELLING, {"warnings": late}), (JobStatus.RUNNING, {}))
        )
        if not won:
            raise _NoLongerOurs(ctx.job_id)
        if outcome.model is not None:
            assert name is not None
            version = models.register_version(
                session=s,
                name=name,
                framework=outcome.model.framework,
                artifact_uri=outcome.model.uri,
                metrics=outcome.model.metrics,
                params=outcome.model.params,
                job_id=ctx.job_id,
                owner=owner,
            )
            jobs.set_model(session=s, job_id=ctx.job_id, name=name, version=version.version)
            values.update(model_name=name, model_version=version.version)
        jobs.add_log(session=s, job_id=ctx.job_id, message=_summary(values))


def _summary(values: dict[str, Any]) -> str:
    if "model_version" in values:
        return f"succeeded: registered {values['model_name']} version {values['model_version']}"
    return "succeeded"


def _finish_cancelled(rt: JobRuntime, ctx: DbJobContext, exc: BaseException) -> None:
    with transaction(rt.db) as s:
        won = jobs.transition(
            session=s,
            job_id=ctx.job_id,
            sources=[JobStatus.CANCELLING],
            target=JobStatus.CANCELLED,
            only_if=ctx.owner,
            finished_at=utcnow(),
            error_reason="CANCELLED",
            error_message="cancelled on request",
        )
        if won:
            jobs.add_log(session=s, job_id=ctx.job_id, message=f"cancelled ({type(exc).__name__})")


def _finish_failed(rt: JobRuntime, ctx: DbJobContext, exc: BaseException, send: Send | None) -> None:
    reason, message = describe_failure(exc)
    log.warning("job %s failed: %s: %s", ctx.job_id, reason, message, exc_info=reason == "INTERNAL")
    if reason == "WORKER_LOST" and _retry_lost_worker(rt, ctx, message, send):
        return
    with transaction(rt.db) as s:
        won = jobs.transition(
            session=s,
            job_id=ctx.job_id,
            sources=[JobStatus.STARTING, JobStatus.RUNNING],
            target=JobStatus.FAILED,
            only_if=ctx.owner,
            finished_at=utcnow(),
            error_reason=reason,
            error_message=message,
        )
        if won:
            jobs.add_log(session=s, job_id=ctx.job_id, level="ERROR", message=f"failed: {reason}: {message}")
            if reason == "INTERNAL":
                tb = "".join(traceback.format_exception(exc))
                jobs.add_log(session=s, job_id=ctx.job_id, level="ERROR", message=tb[-_MAX_MESSAGE:])


def _retry_lost_worker(rt: JobRuntime, ctx: DbJobContext, message: str, send: Send | None) -> bool:
    """WORKER_LOST of a torch training job: end the attempt (FAILED, recorded in ``attempts``) and queue the job
    again from its newest checkpoint when it has one and attempts left. Returns False when the job is not such a
    job, or no longer this runner's, for the ordinary failure path."""
    if send is None:
        return False
    now = utcnow()
    with transaction(rt.db) as s:
        job = s.get(Job, ctx.job_id, with_for_update=True)
        if job is None or job.type != "train" or job.framework != "torch":
            return False
        if not reconcile.end_attempt(session=s, job=job, sources=[JobStatus.STARTING, JobStatus.RUNNING],
                                     reason="WORKER_LOST", message=message, now=now, only_if=ctx.owner):  # fmt: skip
            return False
        s.refresh(job)
        retried = reconcile.retry_from_checkpoint(session=s, job=job, now=now)
        if isinstance(retried, str):
            return True  # FAILED with WORKER_LOST, which is what it is
        queue = jobs.queue_of(job) or rt.settings.queue
        attempt = job.attempt + 1
    log.warning("job %s: a Spark worker was lost; attempt %d resumes from epoch %d", ctx.job_id, attempt, retried.epoch)
    reconcile.send_retry(db=rt.db, send=send, job_id=ctx.job_id, attempt=attempt, queue=queue)
    return True


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """(reason, message) for the job's ``error``: a readable line, never a Java object that does not pickle."""
    if isinstance(exc, JobFailure):
        return exc.reason, exc.message[:_MAX_MESSAGE]
    if isinstance(exc, AppError):
        return "INVALID_REQUEST", exc.detail[:_MAX_MESSAGE]
    java = getattr(exc, "java_exception", None)
    if java is not None:
        message = _java_message(java)
        if any(sign in str(java) or sign in message for sign in _WORKER_LOST):
            return "WORKER_LOST", message
        return "SPARK_ERROR", message
    if type(exc).__module__.startswith("pyspark"):
        return "SPARK_ERROR", f"{type(exc).__name__}: {exc}"[:_MAX_MESSAGE]
    return "INTERNAL", f"{type(exc).__name__}: {exc}"[:_MAX_MESSAGE]


def _java_message(java: Any) -> str:
    """The innermost cause's message; for Python errors on executors, the end of the worker's traceback."""
    try:
        cause = java
        while cause.getCause() is not None:
            cause = cause.getCause()
        text = str(cause.toString())
    except Exception:
        text = str(java)
    # Spark puts the executor's stack into the message: keep the words, drop the JVM frames
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("at ") and line.strip())
    if "Traceback (most recent call last)" in text:
        return text[-_MAX_MESSAGE:]
    return text[:_MAX_MESSAGE]
