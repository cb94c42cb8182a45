"""Class labels a training's data holds that its classes do not: rows of a validation set (or of a held-out share)
whose label the training data never had. Spark ML's StringIndexer would fail the job with a raw "Unseen label"
error, an index lookup would make them class 0; here they are bad rows, refused or dropped as ``dataset.bad_rows``
says, with the labels and how many rows carry each."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from workers.context import JobContext, JobFailure
from workers.numbers import have, n_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SHOWN = 5
"""Unknown labels a failure or a warning names (the most frequent first)."""


def unknown_labels(df: DataFrame, label: str, names: Sequence[str]) -> list[tuple[str, int]]:
    """Each label of ``df`` that is not one of ``names``, with its row count, the most frequent first (one job)."""
    from pyspark.sql import functions as F

    text = F.col(label).cast("string")
    counted = df.where(text.isNotNull() & ~text.isin(list(names))).groupBy(text.alias("name")).count()
    return [(str(r["name"]), int(r["count"])) for r in counted.orderBy(F.desc("count"), "name").collect()]


def drop_or_refuse_unknown(
    ctx: JobContext, df: DataFrame, label: str, names: Sequence[str], *, where: str, bad_rows: str
) -> DataFrame:
    """``df`` without the rows whose label is not one of ``names`` (``bad_rows`` skip, with a warning), or a
    ``BAD_ROWS`` failure naming them (fail)."""
    from pyspark.sql import functions as F

    unknown = unknown_labels(df, label, names)
    if not unknown:
        return df
    count = sum(n for _, n in unknown)
    shown = ", ".join(f"{name!r} ({n_rows(n)})" for name, n in unknown[:SHOWN])
    shown += f" and {len(unknown) - SHOWN} more labels" if len(unknown) > SHOWN else ""
    if bad_rows == "skip":
        ctx.warn(f"dropped {n_rows(count)} of {where} whose label is not a class of the training data: {shown} "
                 "(bad_rows=skip)")  # fmt: skip
        return df.where(F.col(label).cast("string").isin(list(names)))
    raise JobFailure(
        "BAD_ROWS",
        f"{n_rows(count)} of {where} {have(count)} a label the training data does not: {shown}; its classes are "
        f"{list(names)}. "
        'Fix the data or set dataset.bad_rows to "skip" to drop them.',
    )
