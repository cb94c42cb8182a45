"""``POST /train``: plan the request (app/services/planning) and submit the job with its plan."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session, sessionmaker

from app.core.auth import Caller
from app.core.jobstates import JobType
from app.core.settings import Settings
from app.db.models import Job
from app.schemas.train import TrainRequest
from app.services import jobs, quotas
from app.services.access import check_train
from app.services.datasets.deferred import plan_or_defer
from app.services.planning.torch_plan import pin_init_from
from app.services.planning.training import plan_deferred, plan_training

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def plan_in_request(
    *, request: TrainRequest, settings: Settings, spark: SparkSession, db: sessionmaker[Session] | None
) -> Any:
    """Plan a training request in a request thread, where no Spark job may start: the plan, or a deferred plan
    whose data checks the job makes (app/services/datasets/deferred.py). Data-independent errors are 422s."""
    return plan_or_defer(
        lambda: plan_training(request=request, settings=settings, spark=spark, db=db),
        lambda what: plan_deferred(request=request, settings=settings, spark=spark, db=db, deferred=what),
    )


def submit_training(
    *,
    db: sessionmaker[Session],
    settings: Settings,
    spark: SparkSession,
    enqueue: Callable[[str, str], None],
    request: TrainRequest,
    owner: str = "anonymous",
    idempotency_key: str | None = None,
    caller: Caller | None = None,
) -> tuple[Job, bool]:
    """Check the request (422 naming the field), then write the QUEUED job with its plan, commit and enqueue.
    Returns ``(job, created)``. No Spark job runs here: checks that need one are left to the job
    (app/services/datasets/deferred.py), and the stored plan says which. An Idempotency-Key already used for
    this body returns its job before anything is checked (``caller``: the access checks of the route)."""
    fingerprint = jobs.posted_fingerprint(request)
    first = jobs.replayed(db=db, owner=owner, idempotency_key=idempotency_key, fingerprint=fingerprint)
    if first is not None:
        return first, False
    if caller is not None:
        check_train(db=db, request=request, caller=caller, settings=settings)
    plan = plan_in_request(request=request, settings=settings, spark=spark, db=db)
    return jobs.submit(
        db=db,
        enqueue=enqueue,
        job_type=JobType.TRAIN,
        request=pin_init_from(request.model_dump(mode="json", exclude_none=True), db),
        plan=plan,
        framework=request.framework,
        name=request.name,
        owner=owner,
        idempotency_key=idempotency_key,
        limits=quotas.limits_for(settings=settings, owner=owner),
        fingerprint=fingerprint,
    )
