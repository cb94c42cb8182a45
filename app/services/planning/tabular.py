"""What the tabular families (spark_ml, xgboost) share in planning, and the spark_ml plan itself."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.core.errors import ValidationFailed
from app.schemas.train import TrainRequest
from app.services.planning.labels import INTEGER_TYPES, check_whole_labels, resolve_classes
from workers.data.spec import ResolvedDataset
from workers.errors import SpecError
from workers.training.spark_ml.spec import SparkMLPlan, parse_spark_ml_params

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


RESUME_HINT = {
    "xgboost": "a new xgboost job cannot continue from a checkpoint yet: xgboost's checkpoints serve the retries of "
    "the job that wrote them (after a lost driver or executor), and a cancelled job is not retried. Train again: "
    "leave training out and put the same settings in params",
    "spark_ml": "a new spark_ml job cannot continue from a checkpoint: spark_ml's checkpoints serve the retries of "
    "the cross-validation that wrote them. Train again: leave training out and put the settings in params",
}
"""What to do instead of ``training.resume_from``, which only torch jobs take."""

SPLIT_UNUSED = "dataset.split is not used: validation names the validation data, and every training row trains"


def check_tabular(request: TrainRequest, train: Any, *, family: str, normalize_hint: str) -> None:
    """What the tabular families (spark_ml, xgboost) refuse: a network, several labels, normalizers, sequences."""
    for given in ("network", "training"):
        if getattr(request, given) is None:
            continue
        if given == "training" and getattr(request.training, "resume_from", None) is not None:
            raise ValidationFailed.at("training.resume_from", RESUME_HINT[family])
        raise ValidationFailed.at(given, f"{family} takes params, not {given} (torch's): put {family}'s settings in "
                                  "params")  # fmt: skip
    if train.extra_labels:
        raise ValidationFailed.at("dataset.label", f"{family} learns one label column")
    if train.normalize is not None:
        raise ValidationFailed.at("dataset.normalize", normalize_hint)
    if train.sequence is not None:
        raise ValidationFailed.at("dataset.sequence", "sequence datasets train lstm/gru networks (framework torch)")


def plan_spark_ml(
    *,
    request: TrainRequest,
    train: ResolvedDataset,
    validation: ResolvedDataset | None,
    schema: dict[str, str] | None = None,
    spark: SparkSession | None = None,
) -> SparkMLPlan:
    check_tabular(
        request, train, family="spark_ml", normalize_hint="spark_ml scales features itself (params.standardize)"
    )
    dtype = (schema or {}).get(train.label or "")
    classes = train.num_classes
    if request.dataset.task == "classification" and spark is not None and dtype is not None:
        # counted as xgboost's are: a numeric label's model needs its count (evaluation, the signature's
        # probabilities; text labels are indexed in the job, which counts them), and a single text class is a 422
        numbers = dtype in ("float", "double") or dtype.startswith("decimal")
        if numbers:
            check_whole_labels(train)
        if (dtype in INTEGER_TYPES or numbers) and classes is None:
            # 0.0, 1.0, 2.0 (pandas, StringIndexer) too: a fraction is a bad row of the job (Spark failed the fit)
            train = resolve_classes(train, dtype, spark)[0]
            classes = train.num_classes
        elif dtype in INTEGER_TYPES or numbers:
            _check_counted(train, resolve_classes(replace(train, num_classes=None), dtype, spark)[0].num_classes)
        elif dtype == "string":  # a given num_classes is checked against the distinct labels
            classes = resolve_classes(train, dtype, spark)[0].num_classes
        else:
            raise ValidationFailed.at("dataset.label", f"{train.label!r} is {dtype}; class labels are whole numbers "
                                      "0..k-1 or strings")  # fmt: skip
    try:
        spec = parse_spark_ml_params(request.params, task=request.dataset.task, num_classes=train.num_classes)
        if classes is not None:
            spec.check_classes(classes)  # a binomial family (fixed or searched) of more than 2 classes
    except SpecError as exc:
        raise ValidationFailed.of(exc) from exc
    warnings = spec.class_warnings(classes) if classes is not None else []
    if validation is not None and "validation_fraction" in (request.params or {}):
        warnings.append("params.validation_fraction is not used: validation names the validation data")
    return SparkMLPlan(train=train, validation=validation, spec=spec, warnings=tuple(warnings))


def _check_counted(train: ResolvedDataset, counted: int | None) -> None:
    """Spark ML counts a numeric label's classes itself (the largest label + 1) and ignores dataset.num_classes:
    a count that differs is a 422, as xgboost's for text labels."""
    if counted is not None and train.num_classes is not None and counted != train.num_classes:
        raise ValidationFailed.at("dataset.num_classes", f"{train.label!r} has labels 0..{counted - 1}, {counted} "
                                  f"classes, not {train.num_classes}: leave dataset.num_classes out, or number the "
                                  "classes 0..k-1")  # fmt: skip
