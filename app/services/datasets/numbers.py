"""Whether a string column of CSV / JSON-lines data holds numbers: schema inference makes a numeric column with a
single ``n/a`` a string column, and a training job parses a column the request declares numeric row by row
(workers/data/clean.py). How many of a column's values are numbers tells a column of numbers with a few tokens
(a default feature, read as numbers) from a column of text (a 422 when the request declares it numeric: every row
would be bad). Local data is streamed on the driver with pyarrow; other data is counted by Spark, in the job's
planning (app/services/datasets/deferred.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.services.datasets import sample
from app.services.datasets.deferred import before_spark_job
from app.services.datasets.paths import Format
from app.services.datasets.schema import local_text
from app.services.datasets.summary import NUMBER, SUMMARY_BYTES, files_bytes

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

MOSTLY = 0.05
"""At most this fraction of a string column's values may be tokens that are not numbers for the column to be a
default feature (``n/a`` three times among 600 fares)."""


LOCAL_BYTES = SUMMARY_BYTES
"""Local data up to this size (a registration's summary's bound) is counted on the driver, as a request is checked;
larger data is counted by Spark in the job's planning: a request never streams gigabytes through the API process."""


@dataclass(frozen=True)
class Numbers:
    """Of a column's values that are not null: how many there are, how many are not numbers (as Spark's cast to a
    double reads them), and the first of those."""

    values: int
    not_numbers: int
    first: str | None = None

    @property
    def none(self) -> bool:
        """Values, and not one of them a number: text, never a number to train on."""
        return self.values > 0 and self.not_numbers == self.values

    @property
    def mostly(self) -> bool:
        """Numbers but a few tokens (at most :data:`MOSTLY` of the values): numbers to train on."""
        return self.not_numbers < self.values and self.not_numbers <= MOSTLY * self.values


def count_numbers(
    spark: SparkSession, path: str, fmt: Format, options: dict[str, str], columns: list[str]
) -> dict[str, Numbers]:
    """:class:`Numbers` of each of ``columns`` (string columns of CSV / JSON-lines data), streamed on the driver in
    one pass where the data is local, else counted by Spark (deferred in a request)."""
    if not columns:
        return {}
    found = local_text(path, options)
    if found is not None and files_bytes(found[0]) <= LOCAL_BYTES:
        # a partition column's values are the directories' names: not counted, as before
        read = sample.text_columns(found[0], fmt, options, [c for c in columns if c not in found[1]])
        if read is not None:
            return {column: _counted(values) for column, values in read.items()}
    before_spark_job(f"which values of {', '.join(columns)} in {path} are numbers (Spark reads them)")
    from pyspark.sql import functions as F

    from workers.data.spec import ResolvedDataset, read_dataframe

    probe = ResolvedDataset(path=path, format=fmt, features=(), label=None, task=None, options=options)
    df = read_dataframe(spark, probe)
    aggregates = []
    for i, column in enumerate(columns):
        value = F.col(f"`{column.replace('`', '``')}`")
        bad = value.isNotNull() & value.try_cast("double").isNull()
        aggregates += [F.count(value).alias(f"n{i}"), F.count(F.when(bad, 1)).alias(f"b{i}"),
                       F.first(F.when(bad, value), ignorenulls=True).alias(f"f{i}")]  # fmt: skip
    row = df.agg(*aggregates).first()
    return {column: Numbers(int(row[f"n{i}"]), int(row[f"b{i}"]), row[f"f{i}"]) if row else Numbers(0, 0)
            for i, column in enumerate(columns)}  # fmt: skip


def _counted(values: pa.ChunkedArray) -> Numbers:
    import pyarrow.compute as pc

    present = pc.drop_null(values)
    bad = pc.filter(present, pc.invert(pc.match_substring_regex(present, NUMBER)))
    return Numbers(len(present), len(bad), bad[0].as_py() if len(bad) else None)


def shown(token: str | None) -> str:
    """A token that is not a number, for a message: at most 40 characters, on one line."""
    return "" if token is None else f" (such as {_SPACE.sub(' ', token)[:40]!r})"


_SPACE = re.compile(r"\s+")
