"""Which work a job runs: its stored plan, handed to the family driver (training), the evaluation or batch
prediction driver, or the recipe. Drivers live in ``workers`` and report through the job context only."""

from __future__ import annotations

import importlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from app.core.jobstates import JobType
from app.jobs.context import DbJobContext
from app.jobs.runtime import JobRuntime
from app.services import resume
from workers import cluster, plans
from workers.context import JobCancelled, JobFailure, JobOutcome
from workers.environment.losses import losses_watched, lost_within
from workers.families import DRIVERS, RECIPES, plan_type

log = logging.getLogger("sparktrain.jobs")


@dataclass(frozen=True)
class TakenJob:
    """What the runner read of the job row when it took the job (plain values: the row's session is closed)."""

    id: str
    type: str
    framework: str | None
    name: str | None
    request: dict[str, Any]
    plan: dict[str, Any] | None
    attempt: int
    owner: str = "anonymous"


def execute(rt: JobRuntime, ctx: DbJobContext, job: TakenJob) -> JobOutcome:
    """Run the job's work on this driver and return what it produced; raises what the work raised. An executor lost
    meanwhile is a warning in the job's log (a tune job's Spark work is its trials')."""
    if job.type == JobType.TUNE:  # the search runs here; its trials are training jobs of their own
        return _tune(rt, ctx, job)
    with losses_watched(ctx):
        return _execute(rt, ctx, job)


def _execute(rt: JobRuntime, ctx: DbJobContext, job: TakenJob) -> JobOutcome:
    if job.type == JobType.RECIPE:
        if job.name not in RECIPES:
            raise JobFailure("UNSUPPORTED", f"no recipe named {job.name!r}")
        ctx.progress(0.0, f"starting the {job.name} recipe")
        outcome: JobOutcome = importlib.import_module(RECIPES[job.name]).run(ctx, _plan(rt, ctx, job))
        return outcome
    if job.type == JobType.TRAIN:
        if job.framework not in DRIVERS:
            raise JobFailure("UNSUPPORTED", f"no runner for training {job.framework!r} models")
        driver = importlib.import_module(DRIVERS[job.framework])
        plan = _plan(rt, ctx, job)
        _check_fits(rt, ctx, plan, job.attempt)
        if job.attempt > 1:  # it writes its steps again from the checkpoint it continues from (or from scratch)
            ctx.forget_metrics_after(getattr(getattr(plan, "resume", None), "checkpoint_id", None))
        trained: JobOutcome = driver.train(ctx, plan)
        return trained
    if job.type == JobType.EVALUATE:
        from workers.evaluation.driver import evaluate

        return evaluate(ctx, _plan(rt, ctx, job))
    if job.type == JobType.PREDICT:
        from workers.inference.batch import predict

        return predict(ctx, _plan(rt, ctx, job))
    raise JobFailure("UNSUPPORTED", f"no runner for {job.type} jobs")


def _tune(rt: JobRuntime, ctx: DbJobContext, job: TakenJob) -> JobOutcome:
    from app.services.tuning.runner import run_tune
    from app.services.tuning.trials import TuneDriver

    def enqueue(task: str, job_id: str) -> None:
        if rt.send is None:
            raise RuntimeError("this driver has no broker to send trials with")
        rt.send(task, job_id, rt.settings.queue)

    driver = TuneDriver(db=rt.db, settings=rt.settings, spark=rt.spark, enqueue=enqueue, cancel_local=rt.cancel_local,
                        stopping=lambda: rt.stopping, owner=dict(ctx.owner))  # fmt: skip
    return run_tune(ctx, job.request, driver, owner=job.owner)


EXECUTOR_WAIT_S = 120.0
"""How long a job waits for a cluster master's first executor (a driver just started, or its workers restarting)."""


LOSS_LOOKBACK_S = 300.0
"""A job after an executor lost this recently (or within SPARKTRAIN_SLOT_WAIT_S, when longer) waits for its slots:
the cluster's master replaces a lost executor 7 s (a quiet machine) to 80 s (a loaded one) later."""


def _check_fits(rt: JobRuntime, ctx: DbJobContext, plan: Any, attempt: int) -> None:
    """The plan was made against the cluster of the driver that answered the request. A cluster without executors
    yet (a driver that has just started) is waited for, up to :data:`EXECUTOR_WAIT_S`; one with fewer task slots
    than the plan's workers, by a job that has run before or after an executor was lost, up to the settings'
    ``slot_wait_s`` (:func:`_wait_for_slots`)."""
    workers, device = getattr(plan, "num_workers", None), getattr(plan, "device", None)
    if workers is not None:
        slots = cluster.once_registered(
            lambda: cluster.slot_count(rt.spark), wait_s=EXECUTOR_WAIT_S, stop=lambda: ctx.cancelled,
            waiting=lambda: ctx.progress(0.0, "waiting for the cluster's executors to register"),
        )  # fmt: skip
        if ctx.cancelled:
            raise JobCancelled(f"{ctx.job_id}: cancelled while waiting for executors")
        if slots.executors == 0 and not slots.local:  # this driver's state, not the job's fault: queued again (and
            # maybe taken by a driver that has executors) after SPARKTRAIN_RETRY_DELAY_S, while attempts remain
            raise JobFailure("NO_EXECUTORS", f"after {EXECUTOR_WAIT_S:.0f} s, {slots.shortfall()}")
        if workers > slots.count:
            _wait_for_slots(rt, ctx, workers, slots, attempt)
    if device == "cuda" and not cluster.has_gpus(rt.spark):
        raise JobFailure("INVALID_REQUEST", "the job was planned for cuda, and this driver's executors have no GPUs")


def _wait_for_slots(rt: JobRuntime, ctx: DbJobContext, workers: int, slots: cluster.TaskSlots, attempt: int) -> None:
    """A cluster short of the plan's slots. A lost executor is the cluster's state, not the request's: a retry (its
    attempt ended WORKER_LOST when an executor died, and it is taken 1.5 s later) or any job after a loss waits for
    the slots to come back, then continues from its checkpoint; after SPARKTRAIN_SLOT_WAIT_S it ends NO_EXECUTORS and
    is queued again after SPARKTRAIN_RETRY_DELAY_S. A job that never ran on a cluster that lost nothing, or on a local
    master, whose cores do not change, fails at once: a driver of another shape took it."""
    wait_s = rt.settings.slot_wait_s
    lost = 0 if slots.local else lost_within(rt.spark, max(wait_s, LOSS_LOOKBACK_S))
    if slots.local or (attempt <= 1 and not lost):
        raise JobFailure(
            "INVALID_REQUEST",
            f"the job was planned for {workers} workers, and this driver's cluster has {slots.count} task slots "
            "(a barrier stage starts all its tasks or none): drivers sharing a queue need clusters of one shape",
        )
    why = "an executor was lost, Spark is replacing it" if lost else "the job ran before on a cluster that had them"
    started = time.monotonic()

    def waiting(now: cluster.TaskSlots) -> None:
        message = f"waiting for {workers} task slots, {now.count} now: {why}"
        ctx.progress(0.0, message)
        ctx.log(message)

    slots = cluster.once_slots(lambda: cluster.slot_count(rt.spark), workers, wait_s=wait_s, waiting=waiting,
                               stop=lambda: ctx.cancelled or rt.stopping)  # fmt: skip
    if ctx.cancelled:
        raise JobCancelled(f"{ctx.job_id}: cancelled while waiting for task slots")
    if slots.count < workers:
        raise JobFailure("NO_EXECUTORS", f"after {time.monotonic() - started:.0f} s of waiting (SPARKTRAIN_SLOT_WAIT_S="
                         f"{wait_s:g}), {cluster.workers_need(workers)} at once, and {slots.shortfall()}")  # fmt: skip
    ctx.log(f"{slots.count} task slots after {time.monotonic() - started:.0f} s of waiting: the job goes on")


def _plan(rt: JobRuntime, ctx: DbJobContext, job: TakenJob) -> Any:
    """The job's plan, once the data it reads is checked again: a directory that held nothing private when the
    request was checked may hold another owner's batch prediction output by now (app/services/outputs.py)."""
    from app.core.errors import AppError
    from app.services import outputs, spaces

    plan = _stored_plan(rt, ctx, job)
    roots = spaces.for_owner(rt.settings, job.owner).data_roots
    try:
        with rt.db() as session:
            outputs.check_job(session, job_id=job.id, owner=job.owner, plan=plan, roots=roots)
    except AppError as exc:
        raise JobFailure("INVALID_REQUEST", exc.every_problem()) from exc
    return plan


def _stored_plan(rt: JobRuntime, ctx: DbJobContext, job: TakenJob) -> Any:
    """The plan stored with the job. A job queued by a release that did not store plans is planned again from its
    request (the only case in which a job is planned twice)."""
    try:
        cls = plan_type(job.type, job.framework, job.name)
    except KeyError:
        raise JobFailure("UNSUPPORTED", f"no plan for {job.type} jobs of {job.framework or job.name!r}") from None
    if plans.is_deferred(job.plan):
        return _plan_deferred(rt, ctx, job)
    if job.plan is not None:
        try:
            return plans.load(cls, job.plan)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:  # another release's, or edited by hand
            why = f"its stored plan cannot be read ({type(exc).__name__}: {str(exc)[:300]})"
            raise JobFailure("UNSUPPORTED", f"{why}: queued by another release of sparktrain? Submit it again") from exc
    ctx.log("no stored plan (queued by an earlier release): planning the request again")
    ctx.progress(0.0, "checking the request against the data")
    try:
        return _replan(rt, job)
    except PydanticValidationError as exc:  # the request of an earlier release that this one no longer takes
        why = f"{exc.error_count()} errors; the first: {_first_error(exc)}"
        raise JobFailure("UNSUPPORTED", f"queued by an earlier release, and this one does not take its request "
                         f"({why}): submit it again") from exc  # fmt: skip


def _plan_deferred(rt: JobRuntime, ctx: DbJobContext, job: TakenJob) -> Any:
    """A request whose data checks needed a Spark job left them to the job (app/services/datasets/deferred.py):
    plan it now, with Spark; what the request would have refused fails the job with the same message."""
    from app.core.errors import AppError

    checks = "; ".join((job.plan or {}).get("deferred_checks") or [])
    ctx.log(f"the request left its data checks to the job (they need a Spark job: {checks}); checking them now")
    ctx.progress(0.0, "checking the request against the data")
    try:
        plan = _replan(rt, job)
    except AppError as exc:
        raise JobFailure("INVALID_REQUEST", exc.every_problem()) from exc
    if job.attempt <= 1:
        return plan
    with rt.db() as session:  # a retry: xgboost and Spark ML continue from a checkpoint their request cannot name
        resumed, checkpoint = resume.continuing(session, job, job.id, plans.dump(plan), job.request)
    if checkpoint is None:
        return plan
    unit = resume.RULES[resume.kind_of(job)].unit
    ctx.log(f"continuing from checkpoint {checkpoint.id} ({unit} {checkpoint.epoch}) of an earlier attempt")
    return plans.load(type(plan), resumed)


def _replan(rt: JobRuntime, job: TakenJob) -> Any:
    from app.schemas.inference import EvaluateRequest, PredictRequest
    from app.schemas.recipes import GpuSmokeRequest
    from app.schemas.train import TrainRequest
    from app.services.planning.inference import plan_evaluation, plan_prediction
    from app.services.planning.training import plan_training
    from app.services.recipes import plan_gpu_smoke
    from app.services.spaces import for_owner

    settings, spark, db = for_owner(rt.settings, job.owner), rt.spark, rt.db
    if job.type == JobType.TRAIN:
        return plan_training(request=TrainRequest.model_validate(job.request), settings=settings, spark=spark, db=db)
    if job.type == JobType.EVALUATE:
        evaluate = EvaluateRequest.model_validate(job.request)
        return plan_evaluation(request=evaluate, settings=settings, spark=spark, db=db)
    if job.type == JobType.PREDICT:
        predict = PredictRequest.model_validate(job.request)
        return plan_prediction(request=predict, settings=settings, spark=spark, db=db)
    return plan_gpu_smoke(GpuSmokeRequest.model_validate(job.request))


def _first_error(exc: PydanticValidationError) -> str:
    first = exc.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc']) or 'body'}: {first['msg']}"
