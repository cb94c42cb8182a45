"""The classes of a classification job, found in the data when the request does not say: integer indices
0..k-1 as they are (k from the largest label; whole-number doubles too, as pandas writes an integer column with a
missing value, a fraction being a bad row of the job), or strings mapped to indices in sorted order (the mapping is
stored with the model). Local parquet, CSV and JSON lines are read on the driver without a Spark job
(app/services/datasets/schema.py)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.core.errors import ValidationFailed
from app.services.datasets import schema as data
from app.services.datasets.deferred import before_spark_job, in_request
from workers.data.spec import ResolvedDataset
from workers.numbers import shown

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

INTEGER_TYPES = ("tinyint", "smallint", "int", "bigint")
MAX_STRING_CLASSES = 10_000


def resolve_classes(
    train: ResolvedDataset, dtype: str, spark: SparkSession
) -> tuple[ResolvedDataset, tuple[str, ...] | None]:
    """The dataset with ``num_classes`` set, and the string class labels in index order (None for indices)."""
    label = train.label or ""
    if dtype == "string":
        names = tuple(sorted(str(v) for v in _distinct(train, label, spark)))
        if len(names) > MAX_STRING_CLASSES:
            raise ValidationFailed.at("dataset.label", f"more than {MAX_STRING_CLASSES} distinct classes")
        if len(names) < 2:
            raise ValidationFailed.at("dataset.label", f"{label!r} has {len(names)} distinct "
                                      f"value{'' if len(names) == 1 else 's'}: classification needs at least 2 "
                                      "classes in the training data")  # fmt: skip
        if train.num_classes is not None and train.num_classes != len(names):
            raise ValidationFailed.at(
                "dataset.num_classes", f"{label!r} has {len(names)} distinct labels, not {train.num_classes}"
            )
        return replace(train, num_classes=len(names)), names
    if not is_index_type(dtype):
        raise ValidationFailed.at("dataset.label", f"{label!r} is {dtype}; class labels are integers 0..k-1 or strings")
    if dtype not in INTEGER_TYPES:
        check_whole_labels(train, spark)  # a fare is not a class (torch's job failed BAD_ROWS)
    _check_negative(train, spark)
    if train.num_classes is None:
        return replace(train, num_classes=class_count(train, spark)), None
    return train, None


def is_index_type(dtype: str) -> bool:
    """Whether a label column of this type holds class indices: integers, or numbers whose values are whole."""
    return dtype in INTEGER_TYPES or dtype in ("float", "double") or dtype.startswith("decimal")


def _label_values(train: ResolvedDataset, spark: SparkSession | None) -> list[Any] | None:
    """The label's distinct values (up to :data:`MAX_STRING_CLASSES` and one), from local data; for local text too
    large for the driver to read, from Spark (in the job's planning: a request left its plan to the job)."""
    label = train.label or ""
    found = data.distinct_values(train.path, train.format, train.options, label, limit=MAX_STRING_CLASSES)
    if found is None and spark is not None and data.large_local_text(train.path, train.format, train.options):
        return _distinct(train, label, spark)
    return found


def _check_negative(train: ResolvedDataset, spark: SparkSession | None = None) -> None:
    """A 422 for a negative class index (``-1``/``1`` labels), read from local data only (else every such row is
    a bad row of the job)."""
    label = train.label or ""
    found = _label_values(train, spark)
    try:
        values = [float(v) for v in found or () if v is not None]
    except (TypeError, ValueError):  # not numbers after all: the job's label check says so
        return
    odd = next((v for v in values if not math.isfinite(v)), None)
    if odd is not None:  # (int(-inf) was a 500)
        raise ValidationFailed.at("dataset.label", f"{label!r} has the value {shown(odd)}, which is not a class: "
                                  "class labels are integers 0..k-1 (or strings)")  # fmt: skip
    lowest = min(values, default=0.0)
    if lowest < 0:
        said = int(lowest) if lowest == int(lowest) else lowest
        raise ValidationFailed.at("dataset.label", f"{label!r} has the class {said}: class labels are integers "
                                  "0..k-1 (or strings); number the classes from 0 (e.g. -1/1 as 0/1), or give "
                                  "them as text")  # fmt: skip


def class_count(ds: ResolvedDataset, spark: SparkSession) -> int:
    """How many classes integer labels 0..k-1 name: the largest label + 1 (at least 2)."""
    top = top_label(ds, spark)
    if top is None:
        raise ValidationFailed.at("dataset.uri", f"{ds.path} has no labelled rows")
    return max(2, int(top) + 1)


def top_label(ds: ResolvedDataset, spark: SparkSession) -> Any:
    """The largest value of the label column (of its elements, for per-step label arrays of local parquet);
    None when there is none."""
    label = ds.label or ""
    top = data.max_value(ds.path, ds.format, ds.options, label)
    if top is not data.NOT_LOCAL:
        return top
    before_spark_job(f"the largest label of {ds.path} (Spark reads it)")
    from pyspark.sql import functions as F

    from workers.data.spec import read_dataframe

    row = read_dataframe(spark, ds).agg(F.max(label).alias("m")).first()
    return None if row is None else row["m"]


def check_counted(train: ResolvedDataset, counted: int | None) -> None:
    """A 422 when ``dataset.num_classes`` is not the number of classes integer labels name (the largest + 1): Spark
    ML counts them itself and ignores it; xgboost would learn classes no row has, or fail on a label past them."""
    if counted is not None and train.num_classes is not None and counted != train.num_classes:
        raise ValidationFailed.at("dataset.num_classes", f"{train.label!r} has labels 0..{counted - 1}, {counted} "
                                  f"classes, not {train.num_classes}: leave dataset.num_classes out, or number the "
                                  "classes 0..k-1")  # fmt: skip


def local_count(train: ResolvedDataset, spark: SparkSession) -> int | None:
    """The classes integer labels name, where that needs no Spark job in a request: read from local data (a
    registered dataset's files too), or, when the job plans its request, by Spark; None otherwise (a label past the
    classes is then a bad row of the job)."""
    top = data.max_value(train.path, train.format, train.options, train.label or "")
    if top is data.NOT_LOCAL:
        if in_request():
            return None
        top = top_label(train, spark)
    try:
        return None if top is None else max(2, int(float(top)) + 1)
    except (TypeError, ValueError, OverflowError):  # not numbers after all: the job's label check says so
        return None


def _distinct(ds: ResolvedDataset, label: str, spark: SparkSession) -> list[Any]:
    found = data.distinct_values(ds.path, ds.format, ds.options, label, limit=MAX_STRING_CLASSES)
    if found is not None:
        return found
    before_spark_job(f"the classes of {ds.path} (Spark reads them)")
    from pyspark.sql import functions as F

    from workers.data.spec import read_dataframe

    rows = read_dataframe(spark, ds).select(label).where(F.col(label).isNotNull()).distinct()
    return [r[label] for r in rows.limit(MAX_STRING_CLASSES + 1).collect()]


def unused_classes(train: ResolvedDataset, dtype: str) -> str | None:
    """A warning when integer labels leave some of 0..k-1 without a row (labels 1..3 make 4 classes, class 0 never
    seen: scikit-learn's XGBClassifier refuses them), read from local data only (no Spark job for a warning)."""
    if dtype not in INTEGER_TYPES or train.num_classes is None or train.num_classes > MAX_STRING_CLASSES:
        return None
    found = data.distinct_values(train.path, train.format, train.options, train.label or "", limit=train.num_classes)
    if found is None:
        return None
    try:
        missing = sorted(set(range(train.num_classes)) - {int(v) for v in found})
    except (TypeError, ValueError):  # not whole numbers after all: the job's label check says so
        return None
    if not missing:
        return None
    shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
    return (f"dataset.label {train.label!r} has no rows of class {shown} of 0..{train.num_classes - 1} (integer "
            f"labels are class indices): the model learns {train.num_classes} classes, {len(missing)} never seen; "
            "number the classes from 0, or give them as text")  # fmt: skip


def check_whole_labels(train: ResolvedDataset, spark: SparkSession | None = None) -> None:
    """A 422 for a classification label of fractions (a continuous value such as a fare, not a class), read from
    local data only (else every such row is a bad row of the job)."""
    found = _label_values(train, spark)
    try:
        values = [float(v) for v in found or () if v is not None]
    except (TypeError, ValueError):  # not numbers after all: the job's label check says so
        return
    odd = next((v for v in values if not math.isfinite(v)), None)
    if odd is not None:
        raise ValidationFailed.at("dataset.label", f"{train.label!r} has the value {shown(odd)}, which is not a "
                                  "class: class labels are integers 0..k-1 (or strings)")  # fmt: skip
    fraction = next((v for v in values if not v.is_integer()), None)
    if fraction is not None:
        raise ValidationFailed.at("dataset.label", f"{train.label!r} holds fractions (such as {fraction:g}), not "
                                  "classes: class labels are whole numbers 0..k-1 or strings; for a continuous label "
                                  "set dataset.task to regression")  # fmt: skip
