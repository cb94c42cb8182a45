"""What local parquet and JSON-lines data holds that pyarrow reads but Spark refuses, found before a job does: a
nanosecond timestamp (pandas' default ``timestamp[ns]``: ``PARQUET_TYPE_ILLEGAL``, for the whole file even when the
column is not selected), part files that give a column different types (a job fails reading the second), and two
column names that differ only in case (``COLUMN_ALREADY_EXISTS``). Parquet's part files are read for their footers
only (metadata, no data), the first :data:`MAX_FOOTERS` of them."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

MAX_FOOTERS = 1000
"""How many part files' footers are compared (the rest are left to the job)."""


class SparkRefuses(Exception):
    """Data Spark cannot read as it is; the message says what and how to fix it."""


def case_clash(names: Iterable[str]) -> tuple[str, str] | None:
    """Two names that differ only in case (Spark's names know no case), the first such pair."""
    seen: dict[str, str] = {}
    for name in names:
        other = seen.setdefault(name.lower(), name)
        if other != name:
            return other, name
    return None


def check_names(names: Iterable[str], where: str) -> None:
    """Raise :class:`SparkRefuses` for two column names that differ only in case."""
    clash = case_clash(names)
    if clash is not None:
        raise SparkRefuses(f"{where} has the columns {clash[0]!r} and {clash[1]!r}, which differ only in case: "
                           "Spark reads column names without case and refuses both (COLUMN_ALREADY_EXISTS); rename "
                           "one")  # fmt: skip


def _nanos(t: pa.DataType) -> bool:
    import pyarrow as pa

    if pa.types.is_timestamp(t):
        return bool(t.unit == "ns")
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _nanos(t.value_type)
    if pa.types.is_struct(t):
        return any(_nanos(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _nanos(t.key_type) or _nanos(t.item_type)
    return False


def _spark_type(t: pa.DataType) -> str:
    from pyspark.sql.pandas.types import from_arrow_type

    try:
        return str(from_arrow_type(t).simpleString())
    except Exception:  # a type Spark's mapping does not know: compared as pyarrow names it
        return str(t)


_WIDTHS = ({"tinyint": 1, "smallint": 2, "int": 3, "bigint": 4}, {"float": 1, "double": 2})
"""Types Spark's parquet reader widens to a wider one of the same kind (int32 read as bigint, float as double)."""


def _widens(part: str, schema: str) -> bool:
    """Whether Spark reads a part file's ``part`` type as the dataset's ``schema`` type (the first file's): the same
    kind of number, no wider (a first file of int64 and a part of int32 read as bigint; the other way fails)."""
    return any(part in kind and schema in kind and kind[part] <= kind[schema] for kind in _WIDTHS)


def check_parquet(files: list[Path]) -> None:
    """Raise :class:`SparkRefuses` for parquet part files Spark cannot read as one dataset; a footer pyarrow cannot
    read is left to Spark."""
    import pyarrow.parquet as pq

    seen: dict[str, tuple[str, Path]] = {}
    for file in files[:MAX_FOOTERS]:
        try:
            schema = pq.read_schema(file)
        except Exception:
            return  # Spark reads it, and says what is wrong
        for field in schema:
            if _nanos(field.type):
                raise SparkRefuses(f"column {field.name!r} of {file.name} is a timestamp in nanoseconds "
                                   f"({field.type}, pandas' default), which Spark cannot read "
                                   "(PARQUET_TYPE_ILLEGAL), even when the column is not used: write it in "
                                   "microseconds (pandas: df.to_parquet(path, coerce_timestamps='us', "
                                   "allow_truncated_timestamps=True); pyarrow: pq.write_table(table, path, "
                                   "coerce_timestamps='us')), or leave the column out")  # fmt: skip
        check_names(schema.names, file.name)
        for field in schema:
            spark_type = _spark_type(field.type)
            first = seen.setdefault(field.name, (spark_type, file))
            if first[0] != spark_type and not _widens(spark_type, first[0]):
                raise SparkRefuses(f"column {field.name!r} is {first[0]} in {first[1].name} but {spark_type} in "
                                   f"{file.name}: Spark reads every part file with one type, and fails on the "
                                   "other; write the parts with one type")  # fmt: skip


def pandas_index(files: list[Path]) -> set[str]:
    """The columns of parquet data that hold a pandas index (``__index_level_0__``, or the names of the ``pandas``
    metadata's ``index_columns``): written by ``to_parquet`` with the index, not features of the data."""
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(files[0]) if files else None
    except Exception:
        return set()
    if schema is None:
        return set()
    found = {name for name in schema.names if name.startswith("__index_level_") and name.endswith("__")}
    try:
        listed = (schema.pandas_metadata or {}).get("index_columns", [])
    except ValueError:  # metadata that is not JSON
        listed = []
    return found | {name for name in listed if isinstance(name, str) and name in schema.names}
