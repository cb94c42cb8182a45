"""The categories of a torch job's categorical features: a network's input width (one column per category) is part
of its plan, so they are read when the request is planned, not in the job as xgboost's and Spark ML's are
(:func:`workers.data.one_hot.one_hot`).

The categories a network is planned with are always Spark's: the same reading (:func:`workers.data.one_hot.text_of`)
that one-hot encodes the rows, so that no training row can miss its column. A request checks itself against the
categories the driver reads from local CSV, JSON lines or parquet (the network, its size and the rest are 422s at
once), then leaves the plan to the job (app/services/datasets/deferred.py), which reads them with Spark: a
driver's reader differs from Spark's in places (CSV quotes, JSON values that are not text, ``nullValue``). A model
that a request starts from (``training.init_from``) or continues (``resume_from``) keeps the categories it was
trained with (:func:`kept_categories`).

The categories are those of every row of the training data, bad rows too (a category only a bad row has is one
more column that is 0 on every training row); nulls are not a category.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.core.errors import ValidationFailed
from app.services.datasets import schema as data
from app.services.datasets.deferred import before_spark_job, in_request
from workers.data.categories import MAX_LEVELS, Categories, level_of, too_many
from workers.data.spec import ResolvedDataset

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def read_categories(train: ResolvedDataset, spark: SparkSession) -> Categories:
    """The categories of ``train.categorical`` (in a request, as the driver reads them; see the module's
    docstring): 422s name the column with more than :data:`MAX_LEVELS` of them, or none."""
    typed = Categories(inputs=train.features, levels={},
                       types={c: train.column_types.get(c, "string") for c in train.categorical})  # fmt: skip
    if in_request():
        found = _on_driver(train, typed)
        if found is not None:
            return found
    return _with_spark(train, typed, spark)


def spark_reads_them(train: ResolvedDataset) -> None:
    """After a request's checks passed with the driver's categories: the job plans again with Spark's."""
    before_spark_job(f"the categories of {', '.join(train.categorical)} in {train.path} (Spark reads them, as it "
                     "will one-hot encode the rows)")  # fmt: skip


def kept_categories(planned: Categories, trained: dict[str, Any] | None, where: str, what: str) -> Categories:
    """The categories of the model a request starts from or continues (``trained``, its card's ``categorical``):
    its first layer's columns mean those categories, whatever this data holds (one it lacks stays a column, a new
    one is all zeros). A 422 at ``where`` when the model was fed other columns."""
    if trained is None:
        raise ValidationFailed.at(where, f"{what} was trained without categorical features, so its first layer "
                                  "takes no one-hot columns: leave dataset.categorical out")  # fmt: skip
    kept = Categories.from_dict(trained)
    if kept.inputs != planned.inputs or set(kept.levels) != set(planned.levels):
        raise ValidationFailed.at(where, f"{what} was trained on the columns {list(kept.inputs)} with "
                                  f"{sorted(kept.levels)} categorical; this request has {list(planned.inputs)} with "
                                  f"{sorted(planned.levels)}: name the same ones")  # fmt: skip
    return kept


def _on_driver(train: ResolvedDataset, typed: Categories) -> Categories | None:
    levels: dict[str, tuple[str, ...]] = {}
    for i, column in enumerate(train.categorical):
        found = data.distinct_values(train.path, train.format, train.options, column, limit=MAX_LEVELS)
        if found is None:
            return None
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
        raise ValidationFailed.at(where, too_many(column))
    if not texts:
        raise ValidationFailed.at(where, f"{column!r} has no value in the training data")
    return tuple(sorted(texts))


def _with_spark(train: ResolvedDataset, typed: Categories, spark: SparkSession) -> Categories:
    spark_reads_them(train)
    from workers.data.one_hot import distinct_levels
    from workers.data.spec import read_dataframe

    df = read_dataframe(spark, train)
    found = distinct_levels(df, typed, list(train.categorical))  # one Spark pass for every column
    levels: dict[str, tuple[str, ...]] = {}
    for i, column in enumerate(train.categorical):
        texts = found[column]
        levels[column] = _checked(f"dataset.categorical[{i}]", column, len(texts), set(texts))
    return Categories(inputs=typed.inputs, levels=levels, types=typed.types)
