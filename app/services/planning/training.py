"""Planning a training job: the request's dataset (and validation set) checked against the data, then the
family's plan (torch, xgboost, spark_ml)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import ValidationFailed
from app.core.settings import Settings
from app.schemas.train import DatasetRef, TrainingOptions, TrainRequest, ValidationRef
from app.services.datasets.check import locate, resolve_dataset
from app.services.datasets.schema import NUMERIC_TYPES
from app.services.planning.tabular import check_tabular, plan_spark_ml
from app.services.planning.torch_plan import check_options, check_request, plan_torch
from app.services.planning.xgboost_plan import plan_xgboost
from app.services.planning.xgboost_resume import check_early, source
from workers.data.clean import numeric_columns
from workers.errors import SpecError
from workers.families import FRAMEWORKS
from workers.plans import DeferredPlan
from workers.training.spark_ml.spec import parse_spark_ml_params
from workers.training.xgboost.spec import parse_xgboost_params

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _check_basics(request: TrainRequest) -> None:
    if request.framework not in FRAMEWORKS:
        raise ValidationFailed.at(
            "framework", f"{request.framework!r} is not available in this release; use one of {', '.join(FRAMEWORKS)}"
        )
    if request.dataset.label is None:
        raise ValidationFailed.at("dataset.label", "required for training: the column to learn")
    if request.dataset.task is None:
        raise ValidationFailed.at("dataset.task", "required for training: classification or regression")
    ds = request.dataset  # (before the data: a plan left to the job too)
    if ds.categorical and request.framework == "torch" and (ds.sequence is not None or ds.input_shape is not None):
        what = "sequences" if ds.sequence is not None else "dataset.input_shape"
        raise ValidationFailed.at("dataset.categorical", f"one-hot columns are features of a row: they do not "
                                  f"combine with {what}; encode the categories in the data")  # fmt: skip


def _validation_ref(train: DatasetRef, val: ValidationRef) -> DatasetRef:
    """The validation set reads like the training set; weights and the split concern training only."""
    update: dict[str, Any] = {"uri": val.uri, "format": val.format, "options": val.options, "weight": None,
                              "split": None}  # fmt: skip
    if train.sequence is not None:  # validation sequences carry their labels in their own rows
        update["sequence"] = train.sequence.model_copy(update={"labels_uri": None})
    return train.model_copy(update=update)


def plan_training(
    *, request: TrainRequest, settings: Settings, spark: SparkSession, db: sessionmaker[Session] | None = None
) -> Any:
    """The family's plan for this request; raises ValidationFailed (422) with the field at fault."""
    _check_basics(request)
    allow_array = request.framework == "torch"
    notes: list[str] = []  # what the dataset's check says (a default feature with a few tokens that are not numbers)
    train, schema = resolve_dataset(
        request.dataset, settings=settings, spark=spark, allow_array=allow_array, db=db, parse_numbers=True,
        warnings=notes,
    )  # fmt: skip
    validation = None
    if request.validation is not None:
        validation, val_schema = resolve_dataset(
            _validation_ref(request.dataset, request.validation),
            settings=settings,
            spark=spark,
            loc="validation",
            allow_array=allow_array,
            db=db,
            parse_numbers=True,
        )
        _check_apart(train.path, validation.path, request.dataset.uri)
        numeric = set(numeric_columns(train))
        for column in (*train.features, *train.label_columns):
            if not _same_type(schema[column], val_schema.get(column), parsed=column in numeric):
                raise ValidationFailed.at(
                    "validation.uri",
                    f"column {column!r} is {schema[column]} in the training data but "
                    f"{val_schema.get(column, 'missing')} in the validation data",
                )
    plan: Any
    if request.framework == "torch":
        plan = plan_torch(
            request=request, train=train, validation=validation, schema=schema, settings=settings, spark=spark, db=db
        )
    elif request.framework == "spark_ml":
        plan = plan_spark_ml(request=request, train=train, validation=validation, schema=schema, spark=spark)
    elif request.framework == "xgboost":
        plan = plan_xgboost(
            request=request, train=train, validation=validation, schema=schema, settings=settings, spark=spark, db=db
        )
    else:
        raise AssertionError(f"no planner for {request.framework}")
    if notes and hasattr(plan, "warnings"):  # in the 202, and said again when the job starts (Spark ML: no warnings)
        plan = replace(plan, warnings=type(plan.warnings)((*notes, *plan.warnings)))
    return plan


def _check_apart(train: str, validation: str, given: str) -> None:
    """Validation rows must not be training rows: the same path, or a path inside the training directory (Spark
    reads every file below it but those whose names start with ``_`` or ``.``), is a 422."""
    if validation == train:
        raise ValidationFailed.at("validation.uri", "the validation data is the training data; name other data, or "
                                  "leave validation out to hold out a fraction of the rows")  # fmt: skip
    below = validation.removeprefix(train.rstrip("/") + "/") if validation.startswith(train.rstrip("/") + "/") else None
    if below is not None and not any(part.startswith(("_", ".")) for part in below.split("/")):
        raise ValidationFailed.at(
            "validation.uri",
            f"the validation data lies inside the training data ({given!r} reads every file below it), so its rows "
            "would be trained on too; name a training path that does not hold it",
        )


def _same_type(train: str, validation: str | None, *, parsed: bool) -> bool:
    """Whether a column's type in the validation data fits its type in the training data. Numbers fit numbers of
    any width (``int`` and ``bigint``: a CSV's inference and a JSON file's differ; every family reads them as
    floats). A declared numeric column that one file's inference made a string (a token that is not a number) fits
    a numeric one: both are parsed as numbers by the job (docs/datasets.md)."""
    if train == validation or validation is None:
        return train == validation
    if train in NUMERIC_TYPES and validation in NUMERIC_TYPES:
        return True
    return parsed and "string" in (train, validation) and {train, validation} <= {"string", *NUMERIC_TYPES}


def plan_deferred(
    *,
    request: TrainRequest,
    settings: Settings,
    spark: SparkSession,
    db: sessionmaker[Session] | None,
    deferred: str,
) -> DeferredPlan:
    """The plan of a request whose data checks need a Spark job (``deferred``: what the first one would read): the
    checks that need nothing of the data, made now (the datasets' locations, the family's options), and the rest
    left to the job (app/services/datasets/deferred.py)."""
    _check_basics(request)
    ds = request.dataset
    locate(ds.uri, ds.format, ds.options, settings=settings, db=db, loc="dataset.uri")
    if request.validation is not None:
        val = request.validation
        locate(val.uri, val.format, val.options, settings=settings, db=db, loc="validation.uri")
    workers = 1
    if request.framework == "torch":
        check_request(request)
        check_options(request, settings, spark)
        workers = (request.training or TrainingOptions()).num_workers
    else:
        labels = [ds.label] if isinstance(ds.label, str) else list(ds.label or [])
        seen = SimpleNamespace(extra_labels=labels[1:], normalize=ds.normalize, sequence=ds.sequence)
        hint = "spark_ml scales features itself (params.standardize)"
        if request.framework == "xgboost":
            hint = "trees do not need scaled features; leave normalize out"
        check_tabular(request, seen, family=request.framework, normalize_hint=hint)
        found = source(request, db) if request.framework == "xgboost" else None
        spec = None
        try:
            if request.framework == "spark_ml":
                parse_spark_ml_params(request.params, task=ds.task, num_classes=ds.num_classes)
            elif ds.task == "regression" or ds.num_classes is not None:
                spec = parse_xgboost_params(request.params, task=ds.task, num_classes=ds.num_classes)
                workers = spec.num_workers or 1
        except SpecError as exc:
            raise ValidationFailed.of(exc) from exc
        if found is not None:  # the rest (features, classes) once the job reads the data
            check_early(request, found, spec)
    return DeferredPlan(deferred_checks=(deferred,), num_workers=workers)
