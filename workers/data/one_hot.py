"""The Spark side of categorical features (:mod:`workers.data.categories`): the categories fitted on the training
rows, and a DataFrame with the one-hot columns added. Driver-side (pyspark)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from workers.data.categories import MAX_LEVELS, Categories, too_many
from workers.data.spec import ResolvedDataset

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from workers.context import JobContext


def text_of(categories: Categories, column: str) -> Any:
    """A categorical column's values as category text: cast to the type it was trained with first (a CSV's ``02134``
    read as text meets the ``2134`` a parquet's ints gave), null where they do not cast."""
    from pyspark.sql import functions as F

    value = F.col("`" + column.replace("`", "``") + "`")
    kind = categories.kind(column)
    return (value if kind == "string" else value.try_cast(kind)).cast("string")


def expand(categories: Categories, df: DataFrame) -> DataFrame:
    """``df`` with the one-hot columns added (float: 1.0 for the row's category, else 0.0; null where the input
    is null or not of its column's type, so that a pass counting bad rows by their features sees it); the inputs
    stay."""
    from pyspark.sql import functions as F

    names = iter(categories.names)
    added: list[Any] = []
    for column in categories.inputs:
        if column not in categories.levels:
            next(names)
            continue
        text = text_of(categories, column)
        for level in categories.levels[column]:
            added.append(F.when(text.isNotNull(), (text == F.lit(level)).cast("float")).alias(next(names)))
    return df.select("*", *added)


def fit(df: DataFrame, inputs: Iterable[str], columns: Iterable[str], types: Mapping[str, str]) -> Categories:
    """The categories of ``columns`` (of Spark ``types``) in ``df`` (cleaned rows: no nulls), read in one Spark pass
    for every column (:func:`distinct_levels`). Raises ValueError naming the first column with more than
    :data:`MAX_LEVELS` categories, or none."""
    wanted = list(dict.fromkeys(columns))
    typed = Categories(inputs=tuple(inputs), levels={}, types={c: types.get(c, "string") for c in wanted})
    found = distinct_levels(df, typed, wanted)
    levels: dict[str, tuple[str, ...]] = {}
    for column in wanted:
        values = sorted(found[column])
        if len(values) > MAX_LEVELS:
            raise ValueError(too_many(column))
        if not values:
            raise ValueError(f"{column!r} has no value in the training data")
        levels[column] = tuple(values)
    return Categories(inputs=typed.inputs, levels=levels, types=typed.types)


def distinct_levels(df: DataFrame, typed: Categories, columns: Sequence[str]) -> dict[str, list[str]]:
    """Each column's distinct category text in ``df`` (:func:`text_of`; nulls are none), all of them where a column
    has at most :data:`MAX_LEVELS`, else more than that many: one Spark pass over ``df`` for every column (the
    ``(column, category)`` pairs made distinct, at most ``len(columns) * (MAX_LEVELS + 1)`` of them collected).
    Where that many were collected, some column has more; a column with fewer collected may have been cut short,
    and is read again alone, in order up to the first with too many (the caller names the first such column)."""
    from pyspark.sql import functions as F

    if not columns:
        return {}
    pairs = F.explode(F.array(*(F.struct(F.lit(i).alias("i"), text_of(typed, c).alias("level"))
                                for i, c in enumerate(columns))))  # fmt: skip
    most = len(columns) * (MAX_LEVELS + 1)
    rows = df.select(pairs.alias("p")).select("p.i", "p.level").where("level IS NOT NULL").distinct()
    collected = rows.limit(most).collect()
    found: dict[str, list[str]] = {c: [] for c in columns}
    for row in collected:
        found[columns[row["i"]]].append(row["level"])
    if len(collected) < most:
        return found
    for column in columns:
        if len(found[column]) > MAX_LEVELS:
            break
        text = text_of(typed, column).alias("level")
        alone = df.select(text).where("level IS NOT NULL").distinct().limit(MAX_LEVELS + 1).collect()
        found[column] = [r["level"] for r in alone]
        if len(alone) > MAX_LEVELS:
            break
    return found


def one_hot(ctx: JobContext, ds: ResolvedDataset, frames: tuple[DataFrame, ...], fit_on: DataFrame) -> Encoded:
    """A family driver's step after the bad-row pass: the categories of ``ds.categorical`` fitted on ``fit_on`` (the
    cleaned training data: with a held-out fraction, all of its rows, so that a retry whose split moved a rare
    category keeps the columns of its checkpoint), ``frames`` with the one-hot columns, and the dataset whose
    features are those columns. Nothing changes without categorical features."""
    from workers.context import JobFailure

    if not ds.categorical:
        return Encoded(None, ds, ds, frames)
    try:
        categories = fit(fit_on, ds.features, ds.categorical, ds.column_types)
    except ValueError as exc:
        raise JobFailure("INVALID_REQUEST", f"dataset.categorical: {exc}") from exc
    counted = ", ".join(f"{c} ({len(v)} categories)" for c, v in categories.levels.items())
    ctx.log(f"one-hot encoded {counted}: {len(categories.names)} features")
    expanded = tuple(expand(categories, frame) for frame in frames)
    return Encoded(categories, ds, replace(ds, features=categories.names, categorical=()), expanded)


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
        return self.categories.to_dict()

    def column_types(self) -> dict[str, str]:
        """The Spark types of the features the model takes: the request's, and float for each one-hot column
        (what a model's signature records: the columns MLflow's flavors feed it)."""
        types = self.source.column_types
        return {name: types.get(name, "float") for name in self.dataset.features} if self.categories else dict(types)
