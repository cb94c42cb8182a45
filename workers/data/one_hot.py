"""The Spark side of categorical features (:mod:`workers.data.categories`): the categories fitted on the training
rows, and a DataFrame with the one-hot columns added. Driver-side (pyspark)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from workers.data.categories import MAX_LEVELS, Categories
from workers.data.spec import ResolvedDataset

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from workers.context import JobContext


def expand(categories: Categories, df: DataFrame) -> DataFrame:
    """``df`` with the one-hot columns added (float: 1.0 for the row's category, else 0.0; null where the input
    is null, so that a pass counting bad rows by their features sees it); the inputs stay."""
    from pyspark.sql import functions as F

    names = iter(categories.names)
    added: list[Any] = []
    for column in categories.inputs:
        if column not in categories.levels:
            next(names)
            continue
        text = F.col(f"`{column}`").cast("string")
        for level in categories.levels[column]:
            added.append(F.when(text.isNotNull(), (text == F.lit(level)).cast("float")).alias(next(names)))
    return df.select("*", *added)


def fit(df: DataFrame, inputs: Iterable[str], columns: Iterable[str]) -> Categories:
    """The categories of ``columns`` in ``df`` (the cleaned training rows: no nulls), one small Spark job per column
    (at most :data:`MAX_LEVELS` + 1 distinct values are ever collected). Raises ValueError naming a column with more
    categories than that, or none."""
    from pyspark.sql import functions as F

    levels: dict[str, tuple[str, ...]] = {}
    for column in dict.fromkeys(columns):
        text = F.col(f"`{column}`").cast("string").alias("level")
        values = sorted(r["level"] for r in df.select(text).distinct().limit(MAX_LEVELS + 1).collect())
        if len(values) > MAX_LEVELS:
            raise ValueError(
                f"{column!r} has more than {MAX_LEVELS} distinct values in the training rows, the most a categorical "
                "column holds (an identifier is not a feature: leave it out, or bucket it)"
            )
        if not values:
            raise ValueError(f"{column!r} has no value in the training rows")
        levels[column] = tuple(values)
    return Categories(inputs=tuple(inputs), levels=levels)


def one_hot(ctx: JobContext, ds: ResolvedDataset, train: DataFrame, *others: DataFrame) -> Encoded:
    """A family driver's step after the bad-row pass: the categories of ``ds.categorical`` fitted on ``train`` (the
    cleaned training rows), ``train`` and ``others`` (validation rows) with the one-hot columns, and the dataset
    whose features are those columns. Nothing changes without categorical features."""
    from workers.context import JobFailure

    if not ds.categorical:
        return Encoded(None, ds, ds, (train, *others))
    try:
        categories = fit(train, ds.features, ds.categorical)
    except ValueError as exc:
        raise JobFailure("INVALID_REQUEST", f"dataset.categorical: {exc}") from exc
    counted = ", ".join(f"{c} ({len(v)} categories)" for c, v in categories.levels.items())
    ctx.log(f"one-hot encoded {counted}: {len(categories.names)} features")
    frames = tuple(expand(categories, frame) for frame in (train, *others))
    return Encoded(categories, ds, replace(ds, features=categories.names, categorical=()), frames)


@dataclass(frozen=True)
class Encoded:
    categories: Categories | None
    source: ResolvedDataset
    """The dataset as the request gave it: the columns the model is fed from."""
    dataset: ResolvedDataset
    """The dataset as the family trains on it: the one-hot columns as its features."""
    frames: tuple[DataFrame, ...]

    def card(self) -> dict[str, Any]:
        """What the model's card records (``categorical``): the inputs, each column's categories and Spark type."""
        assert self.categories is not None
        types = {c: self.source.column_types.get(c, "string") for c in self.categories.levels}
        return {**self.categories.to_dict(), "types": types}

    def column_types(self) -> dict[str, str]:
        """The Spark types of the features the model takes: the request's, and float for each one-hot column
        (what a model's signature records: the columns MLflow's flavors feed it)."""
        types = self.source.column_types
        return {name: types.get(name, "float") for name in self.dataset.features} if self.categories else dict(types)
