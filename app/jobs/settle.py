"""The one final state of a job's attempt, written by its runner: SUCCEEDED (with the model version), CANCELLED,
FAILED, or an attempt that ended early and is queued again (app/services/reconcile.py, app/services/resume.py).

Every write is guarded by the runner's driver and attempt (``ctx.owner``), so a runner whose job was given up
(the reconciler found its heartbeat stale, or the driver handed it back when told to stop) records nothing. The
writes retry while the database is away (``JobRuntime.write``).
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

from sqlalchemy import update

from app.core.jobstates import JobStatus
from app.db.base import utcnow
from app.db.models import Job
from app.jobs.context import DbJobContext
from app.jobs.failures import MAX_MESSAGE, describe_failure, executor_traceback
from app.jobs.runtime import JobRuntime, RunningJob, Send, spark_gone_error
from app.services import jobs, models, reconcile, resume
from app.spark.session import spark_alive
from workers.context import JobCancelled, JobOutcome

log = logging.getLogger("sparktrain.jobs")
SPARK_STOPPED = "Spark stopped under the job because the driver is stopping; the attempt was handed back"
SPARK_DIED = (
    "the driver's Spark JVM died under the job (look for an OutOfMemoryError or a crash in the driver's log); "
    "the attempt was handed back, and counts against max_attempts unless it saved a checkpoint first"
)


def settle(
    rt: JobRuntime, ctx: DbJobContext, running: RunningJob, ended: JobOutcome | BaseException, send: Send | None
) -> None:
    """Write the one final state (if the job is still this runner's). A bug in writing it must not leave the job
    looking alive."""
    if running.handed_back:
        return  # the stopping driver ended the attempt already; whatever the work raised since is its echo
    try:
        if isinstance(ended, JobOutcome):
            _finish_succeeded(rt, ctx, ended)
        elif ctx.cancelled and not rt.stopping:
            _finish_cancelled(rt, ctx, ended)
        else:
            _finish_failed(rt, ctx, ended, send)
    except Exception as exc:
        taken = isinstance(exc, models.ModelNameTaken)
        if not taken:
            log.exception("could not record the end of job %s", ctx.job_id)
        message = str(exc) if taken else f"recording the result failed: {type(exc).__name__}: {exc}"
        rt.write(
            lambda s: jobs.transition(
                session=s,
                job_id=ctx.job_id,
                sources=[JobStatus.STARTING, JobStatus.RUNNING, JobStatus.CANCELLING],
                target=JobStatus.FAILED,
                only_if=ctx.owner,
                finished_at=utcnow(),
                error_reason="MODEL_NAME_TAKEN" if taken else "INTERNAL",
                error_message=message[:MAX_MESSAGE],
            )
        )


class _NoLongerOurs(Exception):
    """The job left RUNNING/CANCELLING under us (e.g. the reconciler failed it): roll the result back."""


def _finish_succeeded(rt: JobRuntime, ctx: DbJobContext, outcome: JobOutcome) -> None:
    try:
        rt.write(lambda s: _commit_success(s, ctx, outcome), "recording a success")
    except _NoLongerOurs:
        log.warning("job %s finished but is no longer running here; result discarded", ctx.job_id)


def _commit_success(s: Any, ctx: DbJobContext, outcome: JobOutcome) -> None:
    """SUCCEEDED (from CANCELLING with a warning: the cancel came too late) and the model version, in one
    transaction. The guarded transition comes first, so a runner that no longer owns the job writes nothing."""
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
        params = outcome.model.params
        if job.parent_id is not None:  # a tune job's trial: its version says which (as MLflow's run tags would)
            params = {**params, "tune": _trial_tag(s, job)}
        version = models.register_version(
            session=s,
            name=name,
            framework=outcome.model.framework,
            artifact_uri=outcome.model.uri,
            metrics=outcome.model.metrics,
            params=params,
            job_id=ctx.job_id,
            owner=owner,
        )
        jobs.set_model(session=s, job_id=ctx.job_id, name=name, version=version.version)
        values.update(model_name=name, model_version=version.version)
    summary = "succeeded"
    if "model_version" in values:
        summary = f"succeeded: registered {values['model_name']} version {values['model_version']}"
    jobs.add_log(session=s, job_id=ctx.job_id, message=summary)


def _trial_tag(s: Any, job: Job) -> dict[str, Any]:
    """The tune job, the trial's number and the values it sampled (the tune's space read back from its body)."""
    from app.services.tuning.space import exists, lookup

    parent = s.get(Job, job.parent_id)
    space = ((parent.request or {}).get("space") or {}) if parent is not None else {}
    body = job.request or {}
    sampled = {path: lookup(body, path) for path in space if exists(body, path)}
    return {"job_id": job.parent_id, "trial": job.trial, "params": sampled}


def _finish_cancelled(rt: JobRuntime, ctx: DbJobContext, exc: BaseException) -> None:
    def write(s: Any) -> None:
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
            how = (
                "the job stopped at its next check"
                if isinstance(exc, JobCancelled)
                else f"its Spark jobs were stopped ({type(exc).__name__})"
            )
            jobs.add_log(session=s, job_id=ctx.job_id, message=f"cancelled: {how}")

    rt.write(write, "recording a cancel")


def ended_message(reason: str) -> str:
    """A failed job's progress message: what it said last ("attempt 2 queued: resumes from checkpoint ...",
    "epoch 12 of 150") told its user it was still going."""
    return f"failed: {reason}"


def _finish_failed(rt: JobRuntime, ctx: DbJobContext, exc: BaseException, send: Send | None) -> None:
    reason, message = describe_failure(exc)
    if reason in ("SPARK_ERROR", "INTERNAL", "WORKER_LOST"):
        # A stop the operator asked for costs the job no attempt (DRIVER_STOPPED); a JVM that died on its own is a
        # lost driver and costs one (DRIVER_LOST), so a job that kills the JVM every time cannot retry forever.
        if rt.stopping:
            reason, message = "DRIVER_STOPPED", SPARK_STOPPED
        elif spark_gone_error(exc) and not spark_alive(rt.spark):
            reason, message = "DRIVER_LOST", SPARK_DIED
    quiet = reason == "DRIVER_STOPPED"
    if not quiet:
        log.warning("job %s failed: %s: %s", ctx.job_id, reason, message, exc_info=reason == "INTERNAL")
    # an executor's Python traceback, for the job's log (its message keeps the error's words): read here, once, not
    # in a write that may be tried again (py4j calls)
    remote = None if quiet or reason in ("DRIVER_LOST", "INTERNAL") else executor_traceback(exc)
    if reason in resume.RETRYABLE:
        delay = rt.settings.retry_delay_s if reason in resume.DELAYED else 0.0

        def end(s: Any) -> dict[str, Any] | None:
            job = s.get(Job, ctx.job_id, with_for_update=True)
            if job is None:
                return None
            outcome = reconcile.end_and_retry(session=s, job=job, reason=reason, message=message, now=utcnow(),
                                              sources=[JobStatus.STARTING, JobStatus.RUNNING], only_if=ctx.owner,
                                              retry_delay_s=delay)  # fmt: skip
            if outcome is not None and outcome["action"] == "failed":  # no attempt left: not what it said last
                s.execute(update(Job).where(Job.id == ctx.job_id, Job.status == JobStatus.FAILED.value)
                          .values(progress_message=ended_message(reason)))  # fmt: skip
            if outcome is not None and remote is not None:
                jobs.add_log(session=s, job_id=ctx.job_id, level="ERROR",
                             message=f"attempt {ctx.attempt} on the executor: {remote}")  # fmt: skip
            return outcome

        outcome = rt.write(end, f"ending attempt {ctx.attempt}")
        if outcome is not None and outcome["action"] == "retried" and send is not None:
            reconcile.deliver(db=rt.db, send=send, job_id=ctx.job_id, outcome=outcome, default_queue=rt.settings.queue)
        if outcome is not None:
            log.warning("job %s attempt %d ended (%s): %s", ctx.job_id, ctx.attempt, reason,
                        outcome.get("how") or outcome.get("why") or outcome["action"])  # fmt: skip
        return

    def fail(s: Any) -> None:
        won = jobs.transition(
            session=s,
            job_id=ctx.job_id,
            # CANCELLING too: a cancel that arrived as the work failed on its own would leave the row CANCELLING, and
            # the reconciler would end it later saying its driver was gone; it is reported as what it did
            sources=[JobStatus.STARTING, JobStatus.RUNNING, JobStatus.CANCELLING],
            target=JobStatus.FAILED,
            only_if=ctx.owner,
            finished_at=utcnow(),
            error_reason=reason,
            error_message=message,
            progress_message=ended_message(reason),  # not its last attempt's "attempt 2 queued: resumes from ..."
        )
        if won:
            jobs.add_log(session=s, job_id=ctx.job_id, level="ERROR", message=f"failed: {reason}: {message}")
            if reason == "INTERNAL":
                tb = "".join(traceback.format_exception(exc))
                jobs.add_log(session=s, job_id=ctx.job_id, level="ERROR", message=tb[-MAX_MESSAGE:])
            elif remote is not None:
                jobs.add_log(session=s, job_id=ctx.job_id, level="ERROR", message=f"on the executor: {remote}")

    rt.write(fail, "recording a failure")
