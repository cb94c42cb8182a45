"""What the tabular families (spark_ml, xgboost) share in planning, and the spark_ml plan itself."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.core.errors import ValidationFailed
from app.schemas.train import TrainRequest
from app.services.planning.labels import INTEGER_TYPES, check_counted, check_whole_labels, resolve_classes
from workers.data.spec import ResolvedDataset
from workers.errors import SpecError
from workers.training.spark_ml.spec import SparkMLPlan, parse_spark_ml_params

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


RESUME_HINT = {
    "spark_ml": "a new spark_ml job cannot continue from a checkpoint: spark_ml's checkpoints serve the retries of "
    "the cross-validation that wrote them. Train again: leave training out and put the settings in params",
}
"""What to do instead of ``training.resume_from``, which torch and xgboost jobs take."""

SPLIT_UNUSED = "dataset.split is not used: validation names the validation data, and every training row trains"


def check_tabular(request: TrainRequest, train: Any, *, family: str, normalize_hint: str) -> None:
    """What the tabular families (spark_ml, xgboost) refuse: a network, several labels, normalizers, sequences."""
    for given in ("network", "training"):
        if getattr(request, given) is None:
            continue
        resume_from = getattr(request.training, "resume_from", None) if given == "training" else None
        if resume_from is not None and family == "xgboost":
            _only_resume_from(request.training)
            continue
        if resume_from is not None:
            raise ValidationFailed.at("training.resume_from", RESUME_HINT[family])
        raise ValidationFailed.at(given, f"{family} takes params, not {given} (torch's): put {family}'s settings in "
                                  "params")  # fmt: skip
    if train.extra_labels:
        raise ValidationFailed.at("dataset.label", f"{family} learns one label column")
    if train.normalize is not None:
        raise ValidationFailed.at("dataset.normalize", normalize_hint)
    if train.sequence is not None:
        raise ValidationFailed.at("dataset.sequence", "sequence datasets train lstm/gru networks (framework torch)")


def _only_resume_from(options: Any) -> None:
    """xgboost's ``training`` holds ``resume_from`` only: a 422 names another field set (to other than its default:
    a stored request has them all)."""
    defaults = type(options)().model_dump()
    for name, value in options.model_dump().items():
        if name != "resume_from" and value != defaults[name]:
            raise ValidationFailed.at(
                f"training.{name}",
                "xgboost takes only resume_from in training (torch's): put "
                "xgboost's settings in params (num_round for epochs, num_workers, seed, ...)",
            )


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
            check_whole_labels(train, spark)
        if (dtype in INTEGER_TYPES or numbers) and classes is None:
            # 0.0, 1.0, 2.0 (pandas, StringIndexer) too: a fraction is a bad row of the job (Spark failed the fit)
            train = resolve_classes(train, dtype, spark)[0]
            classes = train.num_classes
        elif dtype in INTEGER_TYPES or numbers:
            check_counted(train, resolve_classes(replace(train, num_classes=None), dtype, spark)[0].num_classes)
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
