"""The categories of a torch job's categorical features, read when the request is planned: a network's input
width (one column per category) is part of its plan, so the categories cannot wait for the job as xgboost's and
Spark ML's do (:func:`workers.data.one_hot.one_hot`). Local parquet, CSV and JSON lines are read on the driver
without a Spark job (app/services/datasets/schema.py); other data leaves the plan to the job
(app/services/datasets/deferred.py), which reads them with Spark.

The categories are those of every row of the training data, bad rows too (a category only a bad row has is one
more column that is 0 on every training row); nulls are not a category.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.core.errors import ValidationFailed
from app.services.datasets import schema as data
from app.services.datasets.deferred import before_spark_job
from workers.data.categories import MAX_LEVELS, Categories, level_of
from workers.data.spec import ResolvedDataset

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def read_categories(train: ResolvedDataset, spark: SparkSession) -> Categories:
    """The categories of ``train.categorical``: 422s name the column with more than :data:`MAX_LEVELS` of them, or
    none."""
    typed = Categories(inputs=train.features, levels={},
                       types={c: train.column_types.get(c, "string") for c in train.categorical})  # fmt: skip
    levels: dict[str, tuple[str, ...]] = {}
    for i, column in enumerate(train.categorical):
        found = data.distinct_values(train.path, train.format, train.options, column, limit=MAX_LEVELS)
        if found is None:
            return _with_spark(train, typed, spark)
        texts = {text for text in (_level(v, typed.kind(column)) for v in found) if text is not None}
        levels[column] = _checked(f"dataset.categorical[{i}]", column, len(found), texts)
    return Categories(inputs=typed.inputs, levels=levels, types=typed.types)


def _level(value: Any, kind: str) -> str | None:
    """A value's category text, None where Spark's cast to the column's type would give a null."""
    try:
        return level_of(value, kind)
    except ValueError:
        return None


def _checked(where: str, column: str, seen: int, texts: set[str]) -> tuple[str, ...]:
    if seen > MAX_LEVELS or len(texts) > MAX_LEVELS:
        raise ValidationFailed.at(
            where, f"{column!r} has more than {MAX_LEVELS} distinct values in the training data, the most a "
            "categorical column holds (an identifier is not a feature: leave it out, or bucket it)"
        )  # fmt: skip
    if not texts:
        raise ValidationFailed.at(where, f"{column!r} has no value in the training data")
    return tuple(sorted(texts))


def _with_spark(train: ResolvedDataset, typed: Categories, spark: SparkSession) -> Categories:
    before_spark_job(f"the categories of {', '.join(train.categorical)} in {train.path} (Spark reads them)")
    from workers.data.one_hot import text_of
    from workers.data.spec import read_dataframe

    df = read_dataframe(spark, train)
    levels: dict[str, tuple[str, ...]] = {}
    for i, column in enumerate(train.categorical):
        text = text_of(typed, column).alias("level")
        rows = df.select(text).where("level IS NOT NULL").distinct().limit(MAX_LEVELS + 1).collect()
        levels[column] = _checked(f"dataset.categorical[{i}]", column, len(rows), {r["level"] for r in rows})
    return Categories(inputs=typed.inputs, levels=levels, types=typed.types)
