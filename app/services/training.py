"""``POST /train``: check the request against the data and the family's rules, then queue it.

The same planning runs again in the job (the data may have changed since), so a plan is never stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import ValidationFailed
from app.core.jobstates import JobType
from app.core.settings import Settings
from app.db.models import Job
from app.db.session import transaction
from app.schemas.train import DatasetRef, TrainRequest, ValidationRef
from app.services import jobs
from app.services.dataset_check import resolve_dataset
from workers.errors import SpecError
from workers.families import AVAILABLE_FRAMEWORKS, task_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Enqueue = Callable[[str, str], None]
"""(task name, job id) -> None; raises when the broker does not take the message."""


def spec_error(exc: SpecError) -> ValidationFailed:
    return ValidationFailed(str(exc), errors=[{"loc": exc.path, "msg": exc.message}])


def _validation_ref(train: DatasetRef, val: ValidationRef) -> DatasetRef:
    """The validation set reads like the training set; weights and the split concern training only."""
    update: dict[str, Any] = {"uri": val.uri, "format": val.format, "options": val.options, "weight": None,
                              "split": None}  # fmt: skip
    if train.sequence is not None:  # validation sequences carry their labels in their own rows
        update["sequence"] = train.sequence.model_copy(update={"labels_uri": None})
    return train.model_copy(update=update)


def check_tabular(request: TrainRequest, train: Any, *, family: str, normalize_hint: str) -> None:
    """What the tabular families (spark_ml, xgboost) refuse: a network, several labels, normalizers, sequences."""
    if request.network is not None or request.training is not None:
        raise ValidationFailed.at("network", f"{family} takes params, not network/training")
    if train.extra_labels:
        raise ValidationFailed.at("dataset.label", f"{family} learns one label column")
    if train.normalize is not None:
        raise ValidationFailed.at("dataset.normalize", normalize_hint)
    if train.sequence is not None:
        raise ValidationFailed.at("dataset.sequence", "sequence datasets train lstm/gru networks (framework torch)")


def plan_training(
    *, request: TrainRequest, settings: Settings, spark: SparkSession, db: sessionmaker[Session] | None = None
) -> Any:
    """The family's plan for this request; raises ValidationFailed (422) with the field at fault."""
    if request.framework not in AVAILABLE_FRAMEWORKS:
        raise ValidationFailed.at(
            "framework",
            f"{request.framework!r} is not available in this release; use one of {', '.join(AVAILABLE_FRAMEWORKS)}",
        )
    if request.dataset.label is None:
        raise ValidationFailed.at("dataset.label", "required for training: the column to learn")
    if request.dataset.task is None:
        raise ValidationFailed.at("dataset.task", "required for training: classification or regression")
    allow_array = request.framework == "torch"
    train, schema = resolve_dataset(request.dataset, settings=settings, spark=spark, allow_array=allow_array, db=db)
    validation = None
    if request.validation is not None:
        validation, val_schema = resolve_dataset(
            _validation_ref(request.dataset, request.validation),
            settings=settings,
            spark=spark,
            loc="validation",
            allow_array=allow_array,
            db=db,
        )
        for column in (*train.features, *train.label_columns):
            if val_schema.get(column) != schema[column]:
                raise ValidationFailed.at(
                    "validation.uri",
                    f"column {column!r} is {schema[column]} in the training data but "
                    f"{val_schema.get(column, 'missing')} in the validation data",
                )
    if request.framework == "torch":
        from app.services.torch_plan import plan_torch

        return plan_torch(
            request=request, train=train, validation=validation, schema=schema, settings=settings, spark=spark, db=db
        )
    if request.framework == "spark_ml":
        from workers.training.spark_ml.spec import SparkMLPlan, parse_spark_ml_params

        check_tabular(
            request, train, family="spark_ml", normalize_hint="spark_ml scales features itself (params.standardize)"
        )
        try:
            spec = parse_spark_ml_params(request.params, task=request.dataset.task)
        except SpecError as exc:
            raise spec_error(exc) from exc
        return SparkMLPlan(train=train, validation=validation, spec=spec)
    if request.framework == "xgboost":
        from app.services.xgboost_plan import plan_xgboost

        return plan_xgboost(
            request=request, train=train, validation=validation, schema=schema, settings=settings, spark=spark
        )
    raise AssertionError(f"no planner for {request.framework}")


def submit_training(
    *,
    db: sessionmaker[Session],
    settings: Settings,
    spark: SparkSession,
    enqueue: Enqueue,
    request: TrainRequest,
    owner: str = "anonymous",
    idempotency_key: str | None = None,
) -> tuple[Job, bool]:
    """Validate, write the QUEUED job, commit, then enqueue. Returns ``(job, created)``."""
    plan_training(request=request, settings=settings, spark=spark, db=db)
    body = request.model_dump(mode="json", exclude_none=True)
    with transaction(db) as session:
        job, created = jobs.create_job(
            session=session,
            job_type=JobType.TRAIN,
            request=body,
            framework=request.framework,
            name=request.name,
            owner=owner,
            idempotency_key=idempotency_key,
        )
    if created:
        jobs.enqueue_new(db=db, enqueue=enqueue, task=task_name(JobType.TRAIN, request.framework), job_id=job.id)
    return job, created
