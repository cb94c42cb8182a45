"""``POST /evaluate`` and ``POST /predict`` with a dataset: plan (app/services/planning/inference.py), then submit
the job with its plan. No Spark job runs here: checks that need one are left to the job
(app/services/datasets/deferred.py). Online prediction (inline rows) is app/services/online.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session, sessionmaker

from app.core.auth import Caller
from app.core.jobstates import JobType
from app.core.settings import Settings
from app.db.models import Job
from app.schemas.inference import EvaluateRequest, PredictRequest
from app.services import jobs, outputs, quotas
from app.services.access import check_inference
from app.services.datasets.deferred import plan_or_defer
from app.services.planning.inference import (
    defer_evaluation,
    defer_prediction,
    pinned,
    plan_evaluation,
    plan_prediction,
)
from workers.inference.spec import EvaluationPlan, ModelRef, PredictionPlan
from workers.plans import DeferredPlan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Enqueue = Callable[[str, str], None]


def submit_evaluation(
    *,
    db: sessionmaker[Session],
    settings: Settings,
    spark: SparkSession,
    enqueue: Enqueue,
    request: EvaluateRequest,
    owner: str = "anonymous",
    idempotency_key: str | None = None,
    caller: Caller | None = None,
) -> tuple[Job, bool]:
    """An evaluation: the stored request names the pinned version (an alias may move before the job runs)."""
    first, fingerprint = _replayed_or_checked(db, settings, request, owner, idempotency_key, caller)
    if first is not None:
        return first, False

    def planned() -> tuple[ModelRef, EvaluationPlan]:
        plan = plan_evaluation(request=request, settings=settings, spark=spark, db=db)
        return plan.model, plan

    model, plan = plan_or_defer(
        planned, lambda what: defer_evaluation(request=request, settings=settings, db=db, deferred=what)
    )
    body = pinned(request.model_dump(mode="json", exclude_none=True), model)
    limits = quotas.limits_for(settings=settings, owner=owner)
    return _submit(db, enqueue, JobType.EVALUATE, model, plan, body, owner=owner, idempotency_key=idempotency_key,
                   limits=limits, fingerprint=fingerprint)  # fmt: skip


def submit_prediction(
    *,
    db: sessionmaker[Session],
    settings: Settings,
    spark: SparkSession,
    enqueue: Enqueue,
    request: PredictRequest,
    owner: str = "anonymous",
    idempotency_key: str | None = None,
    caller: Caller | None = None,
) -> tuple[Job, bool]:
    """A batch prediction: the stored request names the pinned version and the output path it will write."""
    first, fingerprint = _replayed_or_checked(db, settings, request, owner, idempotency_key, caller)
    if first is not None:
        return first, False

    def planned() -> tuple[ModelRef, PredictionPlan, str]:
        plan = plan_prediction(request=request, settings=settings, spark=spark, db=db)
        return plan.model, plan, plan.output_path

    model, plan, output = plan_or_defer(
        planned, lambda what: defer_prediction(request=request, settings=settings, db=db, deferred=what)
    )
    body = {**pinned(request.model_dump(mode="json", exclude_none=True), model), "output_uri": output}
    limits = quotas.limits_for(settings=settings, owner=owner)
    with outputs.claim(db):  # the check and the job that claims the path, with no other submission between them
        first = jobs.replayed(db=db, owner=owner, idempotency_key=idempotency_key, fingerprint=fingerprint)
        if first is not None:  # the same key sent twice at once: the second is a replay, not a path taken
            return first, False
        with db() as session:
            outputs.check_target(session, target=output, given=request.output_uri or output)
        return _submit(db, enqueue, JobType.PREDICT, model, plan, body, owner=owner, idempotency_key=idempotency_key,
                       limits=limits, fingerprint=fingerprint, output=output)  # fmt: skip


def _replayed_or_checked(
    db: sessionmaker[Session],
    settings: Settings,
    request: EvaluateRequest | PredictRequest,
    owner: str,
    idempotency_key: str | None,
    caller: Caller | None,
) -> tuple[Job | None, str]:
    """(the job of a replayed Idempotency-Key, or None once the ``caller``'s access checks passed; the fingerprint of
    the body as posted). The key is looked up before anything is checked or planned: a replay returns its job even
    after an alias moved, a newer version was registered or the job wrote its ``output_uri``."""
    fingerprint = jobs.posted_fingerprint(request)
    first = jobs.replayed(db=db, owner=owner, idempotency_key=idempotency_key, fingerprint=fingerprint)
    if first is None and caller is not None:
        check_inference(db=db, model=request.model, dataset=request.dataset, caller=caller, settings=settings)
    return first, fingerprint


def _submit(
    db: sessionmaker[Session],
    enqueue: Enqueue,
    job_type: JobType,
    model: ModelRef,
    plan: EvaluationPlan | PredictionPlan | DeferredPlan,
    body: dict[str, Any],
    *,
    owner: str,
    idempotency_key: str | None,
    limits: quotas.Limits,
    fingerprint: str,
    output: str | None = None,
) -> tuple[Job, bool]:
    return jobs.submit(
        db=db,
        enqueue=enqueue,
        job_type=job_type,
        request=body,
        plan=plan,
        framework=model.framework,
        name=model.name,
        model=(model.name, model.version),
        owner=owner,
        idempotency_key=idempotency_key,
        limits=limits,
        fingerprint=fingerprint,
        output=output,
    )
