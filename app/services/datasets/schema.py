"""What a dataset's columns are, and the few facts of its values a request needs (an array column's width, the
classes of a label column), read without a Spark job wherever the data is local (parquet, CSV, JSON lines).

Why without Spark: a Spark job started from a request waits for a free task slot, and a training job's barrier
stage holds every slot while it trains, so a request that ran one would hang for as long as another job trains.
Local parquet (a file, a directory of part files, or hive-style ``key=value`` partition directories) is read on
the driver with pyarrow: the schema from the footers, the facts by streaming one column in batches. Local CSV and
JSON lines likewise: the schema from a bounded sample of the text, the facts by streaming the one column
(:mod:`app.services.datasets.sample`). What is left to Spark: remote URIs, parquet with reader options, reader
options of CSV / JSON that the sample does not know, compressed CSV / JSON (``rows.csv.gz``), links below a
dataset directory, partition values whose type is not certain here; in ``POST /train`` those checks are left to
the job (:mod:`app.services.datasets.deferred`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from app.core.errors import ValidationFailed
from app.services.datasets import sample, summary
from app.services.datasets.deferred import before_spark_job
from app.services.datasets.footers import SparkRefuses, check_names, check_parquet
from app.services.datasets.paths import Format, compressed
from app.services.datasets.sniff import not_parquet, not_parquet_words, not_text
from workers.data.spec import CORRUPT

if TYPE_CHECKING:
    import pyarrow.dataset as pads
    from pyspark.sql import SparkSession

NUMERIC_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean")
NOT_LOCAL: Any = object()
"""What the value readers answer when the data is not local parquet (Spark must read it)."""
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_INT32 = 2**31
_INT64 = 2**63


def is_numeric_array(dtype: str) -> bool:
    return dtype.startswith("array<") and dtype[6:-1] in NUMERIC_TYPES


def reader_options(fmt: Format, options: dict[str, str]) -> dict[str, str]:
    """CSV has a header and inferred types unless told otherwise (``Header`` too: written as Spark's ``header``, else
    the two spellings would both reach Spark, which keeps one of them, either)."""
    if fmt == "csv":
        given = {_DEFAULTED.get(k.lower(), k): v for k, v in options.items()}
        return {"header": "true", "inferSchema": "true", **given}
    return dict(options)


_DEFAULTED = {"header": "header", "inferschema": "inferSchema"}


def read_schema(spark: SparkSession, path: str, fmt: Format, options: dict[str, str], *, loc: str) -> dict[str, str]:
    """Column name -> Spark simple type name, in Spark's column order. Local parquet is read on the driver (see the
    module's docstring); anything else by Spark (CSV with header + inference, JSON lines, remote data)."""
    from workers.data.spec import ResolvedDataset, read_dataframe

    try:
        local = _local_schema(spark, path, fmt, options, loc=loc)
    except SparkRefuses as exc:
        raise ValidationFailed.at(loc, f"Spark cannot read {path!r} as {fmt}: {exc}") from exc
    if local is not None:
        return local
    before_spark_job(f"the schema of {path} ({_why_spark(path, fmt, options)})")
    probe = ResolvedDataset(path=path, format=fmt, features=(), label=None, task=None, options=options)
    try:
        return _data_columns(dict(read_dataframe(spark, probe).dtypes))
    except Exception as exc:
        raise ValidationFailed.at(loc, f"Spark cannot read {path!r} as {fmt}: {spark_reason(exc)[:500]}") from exc


def _local_schema(
    spark: SparkSession, path: str, fmt: Format, options: dict[str, str], *, loc: str
) -> dict[str, str] | None:
    """The schema of local data read on the driver; None when Spark must read it."""
    if fmt == "parquet" and not options:
        local = parquet_schema(path, infer_partition_types=infers_partition_types(spark))
        if local is not None:
            return local
        unreadable = not_parquet(path)  # a CSV named as parquet: a 422 now, not a failed job after a Spark job
        if unreadable is not None:
            raise ValidationFailed.at(loc, f"Spark cannot read {path!r} as parquet: {not_parquet_words(unreadable)}")
    if fmt in ("csv", "json"):
        problem = not_text(path, fmt, options)
        if problem is not None:
            raise ValidationFailed.at(loc, f"Spark cannot read {path!r} as {fmt}: {problem}")
        text = text_schema_of(path, fmt, options, infer_partition_types=infers_partition_types(spark))
        if text is not None:
            if fmt == "json":
                check_names(text, "the data")
            return _data_columns(text)
    return None


def _data_columns(schema: dict[str, str]) -> dict[str, str]:
    """The schema without the column JSON inference adds when a line does not parse (``_corrupt_record``): it is not
    a column of the data, and the job reads malformed lines as bad rows (workers/data/clean.py)."""
    return {name: dtype for name, dtype in schema.items() if name != CORRUPT}


def spark_reason(exc: BaseException) -> str:
    """The line of a Spark error that says what went wrong: py4j's first line is only "An error occurred while
    calling o8801.load.", the Java exception's message follows it."""
    lines = [line.strip().lstrip(":").strip() for line in str(exc).strip().splitlines()]
    useful = [line for line in lines if line and not line.startswith("An error occurred while calling")]
    return useful[0] if useful else type(exc).__name__


def _why_spark(path: str, fmt: str, options: dict[str, str]) -> str:
    """Why Spark, not the driver, reads this data (said in the job's log when the request defers its checks)."""
    if "://" in path and not path.startswith("file://"):
        return "a remote URI"
    if fmt == "parquet" and options:
        return "parquet with reader options"
    found = _local_parquet(path) if fmt in ("csv", "json") else None
    if found is not None and compressed(found[0], options):
        return "compressed files"
    if fmt in ("csv", "json") and not sample.known_options(fmt, options):
        return f"{fmt} reader options the driver's sample reader does not know"
    return "files or partition values whose types Spark decides"


def text_schema_of(
    path: str, fmt: str, options: dict[str, str], *, infer_partition_types: bool = True
) -> dict[str, str] | None:
    """The schema Spark would infer for local CSV / JSON-lines data, from a bounded sample of the text
    (:mod:`app.services.datasets.sample`) and the partition directories' names; None when Spark must decide."""
    found = local_text(path, options)
    if found is None or (found[1] and not infer_partition_types):
        return None
    inferred = sample.text_schema(found[0], fmt, options)
    if inferred is None:
        return None
    columns = dict(inferred[0])
    for key, spark_type in found[1].items():
        columns.pop(key, None)
        columns[key] = spark_type
    return columns


def infers_partition_types(spark: SparkSession) -> bool:
    """Whether Spark types partition columns from their values (else they are strings, and Spark reads them)."""
    return str(spark.conf.get("spark.sql.sources.partitionColumnTypeInference.enabled", "true")).lower() == "true"


def parquet_schema(path: str, *, infer_partition_types: bool = True) -> dict[str, str] | None:
    """The schema Spark would infer for local parquet data, read from the first file's footer (and the partition
    directories' names) with pyarrow; None when Spark must decide (remote URIs, a footer pyarrow cannot read, a
    type it cannot map, partition values whose type is not certain, partitions of a session that does not infer
    their types)."""
    found = _local_parquet(path)
    return _schema(found, infer_partition_types) if found is not None else None


def local_summary(
    path: str, fmt: str, options: dict[str, str], *, sample_rows: int, infer_partition_types: bool = True
) -> summary.Summary | None:
    """(columns as ``{name, type, nullable, not_numbers}``, row count, the first ``sample_rows`` rows as dicts,
    malformed lines, the first of them) of local data, read on the driver: parquet from the footers and one small
    read (Spark reads every parquet column as nullable, and so does this), CSV and JSON lines in one streamed pass
    (:func:`app.services.datasets.summary.text_summary`). None when Spark must read it."""
    if fmt in ("csv", "json"):
        text = local_text(path, options)
        return summary.text_summary(text[0], fmt, options, sample_rows=sample_rows) if text and not text[1] else None
    found = _local_parquet(path) if fmt == "parquet" and not options else None
    schema = _schema(found, infer_partition_types) if found is not None else None
    dataset = _dataset_of(path, found) if found is not None and schema is not None else None
    if schema is None or dataset is None:
        return None
    import pyarrow as pa

    try:
        rows = _rows(dataset)
        first = dataset.head(sample_rows).to_pylist()
    except (pa.ArrowException, OSError):
        return None
    columns: list[dict[str, Any]] = [{"name": name, "type": dtype, "nullable": True} for name, dtype in schema.items()]
    return columns, rows, first, 0, []


def parquet_rows(path: str, fmt: str, options: dict[str, str], *, enough: int | None = None) -> int | None:
    """The row count of local parquet data, from its footers; None when Spark must read it. With ``enough``, the
    footers are read only until that many rows are counted (a check that needs a minimum reads one footer of a
    large dataset, not all of them)."""
    import pyarrow as pa

    dataset = _dataset(path, fmt, options)
    try:
        return _rows(dataset, enough) if dataset else None
    except (pa.ArrowException, OSError):
        return None


def _rows(dataset: pads.Dataset, enough: int | None = None) -> int:
    counted = 0
    for fragment in dataset.get_fragments():
        counted += fragment.metadata.num_rows
        if enough is not None and counted >= enough:
            break
    return counted


def _schema(found: tuple[list[Path], dict[str, str]], infer_partition_types: bool) -> dict[str, str] | None:
    files, partitions = found
    if partitions and not infer_partition_types:
        return None
    check_parquet(files)
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
    if fmt == "json":
        found = local_text(path, options)
        if found is None or column in found[1]:
            return NOT_LOCAL
        seen, value = sample.first_json_value(found[0], column)
        return value if seen else NOT_LOCAL
    dataset = _dataset(path, fmt, options)
    if dataset is None:
        return NOT_LOCAL
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        for batch in dataset.to_batches(columns=[column], batch_size=1024):
            present = pc.drop_null(batch.column(0))
            if len(present):
                return present[0].as_py()
    except (pa.ArrowException, OSError):  # files pyarrow cannot read as one dataset: Spark reads them
        return NOT_LOCAL
    return None


def distinct_values(path: str, fmt: str, options: dict[str, str], column: str, *, limit: int) -> list[Any] | None:
    """The distinct non-null values of a column of local parquet data, streamed; at most ``limit + 1`` of them (the
    caller refuses more than ``limit``). None when Spark must read the data."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = _text_column(path, fmt, options, column, "string")
    if text is not None:
        return pc.unique(pc.drop_null(text)).to_pylist()
    dataset = _dataset(path, fmt, options)
    if dataset is None:
        return None

    seen: set[Any] = set()
    try:
        for batch in dataset.to_batches(columns=[column]):
            seen.update(pc.unique(pc.drop_null(batch.column(0))).to_pylist())
            if len(seen) > limit:
                break
    except (pa.ArrowException, OSError):
        return None
    return list(seen)


def max_value(path: str, fmt: str, options: dict[str, str], column: str) -> Any:
    """The largest value of a column of local parquet data (of its elements, for per-step label arrays), streamed;
    None when every value is null, :data:`NOT_LOCAL` when Spark must read the data."""
    import pyarrow as pa
    import pyarrow.compute as pc

    text = _text_column(path, fmt, options, column, "double")
    if text is not None:
        return pc.max(text).as_py()
    dataset = _dataset(path, fmt, options)
    if dataset is None:
        return NOT_LOCAL

    top: Any = None
    try:
        for batch in dataset.to_batches(columns=[column]):
            values = batch.column(0)
            if pa.types.is_list(values.type) or pa.types.is_large_list(values.type):
                values = pc.list_flatten(values)
            found = pc.max(values).as_py()
            if found is not None and (top is None or found > top):
                top = found
    except (pa.ArrowException, OSError):
        return NOT_LOCAL
    return top


def _text_column(path: str, fmt: str, options: dict[str, str], column: str, dtype: str) -> Any:
    """A column of local CSV / JSON-lines data, streamed with pyarrow; None when Spark must read it (large text too)."""
    found = local_text(path, options) if fmt in ("csv", "json") else None
    large = found is not None and column not in found[1] and summary.files_bytes(found[0]) > summary.SUMMARY_BYTES
    if large:
        before_spark_job(f"the values of {column!r} in {path} (over {summary.SUMMARY_BYTES >> 20} MiB of text)")
    if found is None or column in found[1] or large:
        return None
    return sample.column_values(found[0], fmt, options, column, dtype)


def large_local_text(path: str, fmt: str, options: dict[str, str]) -> bool:
    """Whether ``path`` is local CSV / JSON text too large for the driver to read (checks of local data ask Spark)."""
    found = local_text(path, options) if fmt in ("csv", "json") else None
    return found is not None and summary.files_bytes(found[0]) > summary.SUMMARY_BYTES


def _dataset(path: str, fmt: str, options: dict[str, str]) -> pads.Dataset | None:
    """The pyarrow dataset of local parquet data read as Spark reads it; None when Spark must read it."""
    found = _local_parquet(path) if fmt == "parquet" and not options else None
    return _dataset_of(path, found) if found is not None else None


def _dataset_of(path: str, found: tuple[list[Path], dict[str, str]]) -> pads.Dataset | None:
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


def local_text(path: str, options: dict[str, str]) -> tuple[list[Path], dict[str, str]] | None:
    """(data files, partition column -> Spark type) of local CSV / JSON-lines data the driver reads itself (the file
    walk is parquet's); None when Spark must read it, as for parquet, or when the files are compressed (the
    driver's readers read text, and Spark unpacks it)."""
    found = _local_parquet(path)
    return None if found is None or compressed(found[0], options) else found


def _local_parquet(path: str) -> tuple[list[Path], dict[str, str]] | None:
    """(data files, partition column -> Spark type) of local parquet data, in Spark's order; None when Spark must
    read it (remote URIs, nothing to read, links below the directory, directories that are not ``key=value``
    partitions, partition values whose type is not certain)."""
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
            if any((Path(top) / entry).is_symlink() for entry in (*dirs, *names)):
                return None  # whether a link is followed is the file system's business: Spark reads it
            here = Path(top).relative_to(base).parts
            if any("=" not in part for part in here):
                return None  # not a partition directory: Spark decides what it means
            shown = (Path(top) / n for n in sorted(names) if not n.startswith(("_", ".")))
            data = [f for f in shown if f.stat().st_size]
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
        spark_type = partition_type(values[key])
        if spark_type is None:
            return None
        partitions[key] = spark_type
    return files, partitions


_INTEGRAL = re.compile(r"^[+-]?[0-9]+$")
_FRACTIONAL = re.compile(r"^[+-]?[0-9]*\.[0-9]+$")  # "2." is a decimal to Spark (no digits after the point)
_WIDER = {
    frozenset({"int"}): "int",
    frozenset({"bigint"}): "bigint",
    frozenset({"double"}): "double",
    frozenset({"int", "bigint"}): "bigint",
    frozenset({"int", "double"}): "double",
    frozenset({"bigint", "double"}): "string",  # Spark: long and double widen to string
    frozenset({"int", "bigint", "double"}): "string",
}


def partition_type(values: set[str]) -> str | None:
    """The type Spark infers for a partition column from its directory values, or None when that is not certain
    here (then Spark reads the data).

    Spark tries each value as an int, a long, a decimal without a fraction, a double, a timestamp and a date, in
    that order, and widens the values' types to one (int + long: long; int + double: double; long + double:
    string; anything + string: string). Here a value is an int or a long when it is plainly one (``[+-]digits``
    in range), a double when it is plainly a decimal fraction (``1.5``, ``.5``, ``-2.0``), and a string when it has
    no digit and is not one of Java's special doubles; anything else (exponents, integers beyond a long, dates,
    timestamps, ``NaN``, hex, ``1.5d``, blanks) is left to Spark."""
    kinds: set[str] = set()
    for value in values:
        if value == _HIVE_NULL:
            continue  # null
        if _INTEGRAL.match(value):
            number = int(value)
            if -_INT32 <= number < _INT32:
                kinds.add("int")
            elif -_INT64 <= number < _INT64:
                kinds.add("bigint")
            else:
                return None  # a decimal to Spark
        elif _FRACTIONAL.match(value):
            kinds.add("double")
        elif any(c.isdigit() for c in value) or value.strip() != value or "nfinity" in value or "NaN" in value:
            return None
        else:
            kinds.add("string")
    if not kinds or "string" in kinds:
        return "string"
    return _WIDER[frozenset(kinds)]
