"""Runs one job for a Celery task: the guarded start, the Spark job group, heartbeats, the job's work, and
exactly one final state.

A runner owns its job while the row names its driver (``worker_id``) and its attempt. Everything it records
after the start (checkpoints, progress, the final state, the model version) is conditional on that, so a runner
whose job was given up by the reconciler (its heartbeats stalled; another driver may run the next attempt now)
stops and records nothing: one job never has two writers.

When Spark loses a worker of a torch training job's barrier stage (a Python worker or an executor died: the
stage fails at once, and Spark does not retry a failed barrier result stage), the attempt ends as WORKER_LOST and
the job is queued again from its newest checkpoint, like a job whose driver died (app/services/reconcile.py).
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from typing import Any

from app.core.jobstates import JobStatus
from app.db.base import utcnow
from app.db.models import Job
from app.db.session import transaction
from app.jobs.context import DbJobContext
from app.jobs.dispatch import TakenJob, execute
from app.jobs.failures import MAX_MESSAGE, describe_failure
from app.jobs.runtime import JobRuntime
from app.jobs.watcher import Watcher
from app.services import attempts, jobs, models, reconcile
from workers.context import JobOutcome

log = logging.getLogger("sparktrain.jobs")
Send = Callable[[str, str, str], None]
"""``send(task_name, job_id, queue)``: put a job's message on a queue (for retries)."""


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
            row = jobs.get_job(session=s, job_id=job_id)
            row.attempts = attempts.update_attempt(row, row.attempt, queue=queue or rt.settings.queue)
            job = TakenJob(id=row.id, type=row.type, framework=row.framework, name=row.name, request=row.request,
                           plan=row.plan, attempt=row.attempt)  # fmt: skip
    if not won:
        _ignore_delivery(rt, job_id)
        return
    running = rt.running.add(job_id)
    watcher = Watcher(rt, running, job.attempt)
    sc = rt.spark.sparkContext
    sc.setJobGroup(job_id, f"sparktrain {job.type} job {job_id}", interruptOnCancel=True)
    work_dir = rt.settings.artifact_root / "jobs" / job_id
    work_dir.mkdir(parents=True, exist_ok=True)
    ctx = DbJobContext(rt, job_id, job.attempt, running, work_dir)
    watcher.start()
    try:
        ctx.log(f"attempt {job.attempt} started on {rt.worker_id} (Spark application {sc.applicationId})")
        with transaction(rt.db) as s:
            jobs.transition(session=s, job_id=job_id, sources=[JobStatus.STARTING], target=JobStatus.RUNNING,
                            only_if=ctx.owner)  # fmt: skip
        ctx.check_cancelled()
        outcome = execute(rt, ctx, job)
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
                    :MAX_MESSAGE
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
                jobs.add_log(session=s, job_id=ctx.job_id, level="ERROR", message=tb[-MAX_MESSAGE:])


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
        queue = attempts.queue_of(job) or rt.settings.queue
        attempt = job.attempt + 1
    log.warning("job %s: a Spark worker was lost; attempt %d resumes from epoch %d", ctx.job_id, attempt, retried.epoch)
    reconcile.send_retry(db=rt.db, send=send, job_id=ctx.job_id, attempt=attempt, queue=queue)
    return True
