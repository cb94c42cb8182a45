"""What the tabular families (spark_ml, xgboost) share in planning, and the spark_ml plan itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.core.errors import ValidationFailed
from app.schemas.train import TrainRequest
from app.services.planning.labels import INTEGER_TYPES, resolve_classes
from workers.data.spec import ResolvedDataset
from workers.errors import SpecError
from workers.training.spark_ml.spec import SparkMLPlan, parse_spark_ml_params

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


SPLIT_UNUSED = "dataset.split is not used: validation names the validation data, and every training row trains"


def check_tabular(request: TrainRequest, train: Any, *, family: str, normalize_hint: str) -> None:
    """What the tabular families (spark_ml, xgboost) refuse: a network, several labels, normalizers, sequences."""
    for given in ("network", "training"):
        if getattr(request, given) is not None:
            raise ValidationFailed.at(given, f"{family} takes params, not {given} (torch's): put {family}'s "
                                      "settings in params")  # fmt: skip
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
    try:
        spec = parse_spark_ml_params(request.params, task=request.dataset.task, num_classes=train.num_classes)
        binomial = "binomial" in spec.searched("family", "auto")[1]
        if train.num_classes is None and spark is not None and dtype in (*INTEGER_TYPES, "string") and binomial:
            # counted only for a binomial family (Spark refuses more than 2 classes): resolve_classes refuses labels
            # Spark ML takes otherwise (fractional ones, a single class)
            spec.check_classes(resolve_classes(train, dtype, spark)[0].num_classes or 0)
    except SpecError as exc:
        raise ValidationFailed.of(exc) from exc
    return SparkMLPlan(train=train, validation=validation, spec=spec)
