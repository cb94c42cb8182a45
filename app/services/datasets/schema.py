"""What a dataset's columns are, and the few facts of its values a request needs (an array column's width, the
classes of a label column), read without a Spark job wherever the data is local parquet.

Why without Spark: a Spark job started from a request waits for a free task slot, and a training job's barrier
stage holds every slot while it trains, so a request that ran one would hang for as long as another job trains.
Local parquet (a file, a directory of part files, or hive-style ``key=value`` partition directories) is read on
the driver with pyarrow: the schema from the footers, the facts by streaming one column in batches. Everything
else (CSV, JSON lines, remote URIs, parquet with reader options, partition values whose type Spark would infer as a
date or timestamp) is read by Spark.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from app.core.errors import ValidationFailed
from app.services.datasets.paths import Format

if TYPE_CHECKING:
    import pyarrow.dataset as pads
    from pyspark.sql import SparkSession

NUMERIC_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean")
NOT_LOCAL: Any = object()
"""What the value readers answer when the data is not local parquet (Spark must read it)."""
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_INT32 = 2**31
_INT64 = 2**63
_DATE_LIKE = re.compile(r"^\d{4}-\d{1,2}-\d{1,2}")


def is_numeric_array(dtype: str) -> bool:
    return dtype.startswith("array<") and dtype[6:-1] in NUMERIC_TYPES


def reader_options(fmt: Format, options: dict[str, str]) -> dict[str, str]:
    """CSV has a header and inferred types unless told otherwise."""
    if fmt == "csv":
        return {"header": "true", "inferSchema": "true", **options}
    return dict(options)


def read_schema(spark: SparkSession, path: str, fmt: Format, options: dict[str, str], *, loc: str) -> dict[str, str]:
    """Column name -> Spark simple type name, in Spark's column order. Local parquet is read on the driver (see the
    module's docstring); anything else by Spark (CSV with header + inference, JSON lines, remote data)."""
    from workers.data.spec import ResolvedDataset, read_dataframe

    if fmt == "parquet" and not options:
        local = parquet_schema(path)
        if local is not None:
            return local
    probe = ResolvedDataset(path=path, format=fmt, features=(), label=None, task=None, options=options)
    try:
        return dict(read_dataframe(spark, probe).dtypes)
    except Exception as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValidationFailed.at(loc, f"Spark cannot read {path!r} as {fmt}: {first_line[:500]}") from exc


def parquet_schema(path: str) -> dict[str, str] | None:
    """The schema Spark would infer for local parquet data, read from the first file's footer (and the partition
    directories' names) with pyarrow; None when Spark must decide (remote URIs, a footer pyarrow cannot read, a
    type it cannot map, partition values Spark would read as dates or timestamps)."""
    found = _local_parquet(path)
    if found is None:
        return None
    files, partitions = found
    try:
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import from_arrow_type

        columns = {f.name: from_arrow_type(f.type).simpleString() for f in pq.read_schema(files[0])}
    except Exception:  # Spark reads it (and says what is wrong when it cannot)
        return None
    for key, spark_type in partitions.items():
        columns.pop(key, None)  # a partition column's value comes from the path, as Spark reads it
        columns[key] = spark_type
    return columns


def first_value(path: str, fmt: str, options: dict[str, str], column: str) -> Any:
    """The first non-null value of a column of local parquet data (None when every value is null), reading batch
    by batch until one is found; :data:`NOT_LOCAL` when Spark must read the data."""
    dataset = _dataset(path, fmt, options)
    if dataset is None:
        return NOT_LOCAL
    import pyarrow.compute as pc

    for batch in dataset.to_batches(columns=[column], batch_size=1024):
        present = pc.drop_null(batch.column(0))
        if len(present):
            return present[0].as_py()
    return None


def distinct_values(path: str, fmt: str, options: dict[str, str], column: str, *, limit: int) -> list[Any] | None:
    """The distinct non-null values of a column of local parquet data, streamed; at most ``limit + 1`` of them (the
    caller refuses more than ``limit``). None when Spark must read the data."""
    dataset = _dataset(path, fmt, options)
    if dataset is None:
        return None
    import pyarrow.compute as pc

    seen: set[Any] = set()
    for batch in dataset.to_batches(columns=[column]):
        seen.update(pc.unique(pc.drop_null(batch.column(0))).to_pylist())
        if len(seen) > limit:
            break
    return list(seen)


def max_value(path: str, fmt: str, options: dict[str, str], column: str) -> Any:
    """The largest value of a column of local parquet data (of its elements, for per-step label arrays), streamed;
    None when every value is null, :data:`NOT_LOCAL` when Spark must read the data."""
    dataset = _dataset(path, fmt, options)
    if dataset is None:
        return NOT_LOCAL
    import pyarrow as pa
    import pyarrow.compute as pc

    top: Any = None
    for batch in dataset.to_batches(columns=[column]):
        values = batch.column(0)
        if pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
            values = pc.list_flatten(values)
        found = pc.max(values).as_py()
        if found is not None and (top is None or found > top):
            top = found
    return top


def _dataset(path: str, fmt: str, options: dict[str, str]) -> pads.Dataset | None:
    """The pyarrow dataset of local parquet data read as Spark reads it; None when Spark must read it."""
    found = _local_parquet(path) if fmt == "parquet" and not options else None
    if found is None:
        return None
    import pyarrow as pa
    import pyarrow.dataset as ds

    files, partitions = found
    arrow = {"int": pa.int32(), "bigint": pa.int64(), "double": pa.float64(), "string": pa.string()}
    try:
        if not partitions:
            return ds.dataset([str(f) for f in files], format="parquet")
        schema = pa.schema([(key, arrow[t]) for key, t in partitions.items()])
        return ds.dataset(
            [str(f) for f in files],
            format="parquet",
            partitioning=ds.partitioning(schema, flavor="hive", dictionaries=None),
            partition_base_dir=str(_base(path)),
        )
    except Exception:
        return None


def _base(path: str) -> Path:
    return Path(urlparse(path).path if path.startswith("file://") else path)


def _local_parquet(path: str) -> tuple[list[Path], dict[str, str]] | None:
    """(data files, partition column -> Spark type) of local parquet data, in Spark's order; None when Spark must
    read it (remote URIs, nothing to read, directories that are not ``key=value`` partitions)."""
    if "://" in path and not path.startswith("file://"):
        return None
    base = _base(path)
    try:
        if base.is_file():
            return [base], {}
        if not base.is_dir():
            return None
        files: list[Path] = []
        keys: list[str] | None = None
        values: dict[str, set[str]] = {}
        for top, dirs, names in os.walk(base):
            dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
            here = Path(top).relative_to(base).parts
            if any("=" not in part for part in here):
                return None  # not a partition directory: Spark decides what it means
            data = [
                Path(top) / n for n in sorted(names) if not n.startswith(("_", ".")) and os.path.getsize(Path(top) / n)
            ]
            if not data:
                continue
            found = [unquote(part.split("=", 1)[0]) for part in here]
            if keys is None:
                keys = found
            elif found != keys:
                return None  # Spark refuses conflicting partition directories; let it say so
            for part in here:
                key, value = part.split("=", 1)
                values.setdefault(unquote(key), set()).add(unquote(value))
            files.extend(data)
    except OSError:
        return None
    if not files:
        return None
    partitions: dict[str, str] = {}
    for key in keys or []:
        spark_type = _partition_type(values[key])
        if spark_type is None:
            return None
        partitions[key] = spark_type
    return files, partitions


def _partition_type(values: set[str]) -> str | None:
    """The type Spark infers for a partition column from its directory values (int, bigint, double or string);
    None for values it would read as dates, timestamps or decimals, which are left to Spark."""
    present = [v for v in values if v != _HIVE_NULL]
    if not present:
        return "string"
    ints: list[int] = []
    floats = 0
    for value in present:
        if "e" in value.lower() and not value.lower().lstrip("+-").startswith(("inf", "nan")):
            return None  # 1e5: a decimal to Spark
        try:
            ints.append(int(value))
            continue
        except ValueError:
            pass
        try:
            float(value)
            floats += 1
        except ValueError:
            return None if _DATE_LIKE.match(value) else "string"
    if floats:
        return "double"
    if all(-_INT32 <= v < _INT32 for v in ints):
        return "int"
    if all(-_INT64 <= v < _INT64 for v in ints):
        return "bigint"
    return None  # a decimal to Spark
