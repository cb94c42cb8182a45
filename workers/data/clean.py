"""Bad rows (docs/datasets.md): by default the job fails with their count and the first few; ``skip`` drops them
and reports how many. Never a silent drop. Counting and checking take one pass over the data."""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING, Any

from workers.context import JobContext, JobFailure
from workers.data.spec import ResolvedDataset

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

EXAMPLES = 5
_FLOATS = ("double", "float")


def _bad_value(df: DataFrame, column: str, array_length: int | None) -> Column:
    from pyspark.sql import functions as F

    col, dtype = F.col(column), dict(df.dtypes)[column]
    if dtype.startswith("array"):
        cond = col.isNull() | F.exists(col, lambda v: v.isNull() | F.isnan(v) | (F.abs(v) == float("inf")))
        if array_length is not None:
            cond = cond | (F.size(col) != array_length)
        return cond
    cond = col.isNull()
    if dtype in _FLOATS:
        cond = cond | F.isnan(col) | (F.abs(col) == float("inf"))
    return cond


def clean(
    ctx: JobContext,
    df: DataFrame,
    ds: ResolvedDataset,
    *,
    array_length: int | None = None,
    extra_columns: tuple[str, ...] = (),
) -> tuple[DataFrame, int, int]:
    """Keep the dataset's features, label and ``extra_columns``; apply the bad-row policy. A row is bad when a
    feature or the label is null or NaN, an array feature has the wrong length, or a class label lies outside
    ``0..num_classes-1``. Returns (clean frame, usable rows, dropped rows)."""
    from pyspark.sql import functions as F

    columns = [*ds.features, *ds.label_columns, *([ds.weight] if ds.weight else [])]
    conditions = [_bad_value(df, c, array_length) for c in columns]
    reasons = "a null, NaN or infinite value"
    if array_length:
        reasons += f" or an array whose length is not {array_length}"
    if ds.weight:
        conditions.append(F.col(ds.weight) < 0)
        reasons += " or a negative weight"
    if ds.label and ds.task == "classification" and ds.num_classes is not None:
        label = F.col(ds.label)
        conditions.append((label < 0) | (label >= ds.num_classes) | (label != F.floor(label)))
        reasons += f" or a label outside 0..{ds.num_classes - 1}"
    bad = reduce(lambda a, b: a | b, conditions)
    flagged = df.select(*columns, *extra_columns).withColumn("_bad", bad)
    counts = flagged.agg(F.count(F.lit(1)).alias("n"), F.sum(F.col("_bad").cast("int")).alias("bad")).first()
    assert counts is not None
    total, bad_count = int(counts["n"]), int(counts["bad"] or 0)
    if bad_count == 0:
        return flagged.drop("_bad"), total, 0
    if ds.bad_rows == "fail":
        examples: list[dict[str, Any]] = [
            _short(r.asDict()) for r in flagged.where(F.col("_bad")).drop("_bad").limit(EXAMPLES).collect()
        ]
        raise JobFailure(
            "BAD_ROWS",
            f"{bad_count} rows of {ds.path} have {reasons} in {', '.join(columns)}; first ones: {examples}. "
            'Fix the data or set dataset.bad_rows to "skip" to drop them.',
        )
    ctx.warn(f"dropped {bad_count} rows of {ds.path} with {reasons} (bad_rows=skip)")
    return flagged.where(~F.col("_bad")).drop("_bad"), total - bad_count, bad_count


def _short(row: dict[str, Any]) -> dict[str, Any]:
    """Long arrays shown as their length and first values, so a message stays readable."""
    out = {}
    for k, v in row.items():
        out[k] = f"[{len(v)} values: {v[:3]}...]" if isinstance(v, list) and len(v) > 6 else v
    return out
