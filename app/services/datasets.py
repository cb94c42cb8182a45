"""Dataset URIs: resolution inside the configured data roots, format detection, schema inspection."""

from __future__ import annotations

import math
import os
import re
import uuid
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlparse

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.errors import NotFound, ValidationFailed
from app.core.settings import Settings
from app.db.base import utcnow
from app.db.models import Dataset
from app.schemas.datasets import DatasetCreate

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Format = Literal["parquet", "csv", "json"]
NUMERIC_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean")
_EXTENSIONS: dict[str, Format] = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
}


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _missing(uri: str, roots: Sequence[Path], loc: str) -> ValidationFailed:
    roots_text = ", ".join(str(r) for r in roots)
    return ValidationFailed.at(loc, f"{uri!r} does not exist in the data roots ({roots_text})")


_DOT_SEGMENT = re.compile(r"(^|/)\.{1,2}(/|$)")


def _remote(uri: str, scheme: str, remote_prefixes: Sequence[str], loc: str) -> str:
    """A remote URI under an allowed prefix. The prefix must end at a path boundary, and no '.' or '..' segment
    (also percent-encoded) may climb out of it: Hadoop normalizes them away before it reads."""
    decoded = unquote(uri)
    if _DOT_SEGMENT.search(urlparse(decoded).path) or "\x00" in decoded:
        raise ValidationFailed.at(loc, f"{uri[:200]!r}: '.' and '..' segments are not allowed in remote URIs")
    for prefix in remote_prefixes:
        if uri.startswith(prefix) and (prefix.endswith("/") or uri[len(prefix) : len(prefix) + 1] in ("", "/")):
            return uri
    allowed = ", ".join(remote_prefixes) or "none are configured (SPARKTRAIN_REMOTE_URI_PREFIXES)"
    raise ValidationFailed.at(loc, f"{scheme}:// URIs must start with an allowed prefix; {allowed}")


MAX_ENTRIES = 100_000
"""Files a dataset directory may hold; each one is checked to stay inside the data roots."""


def _check_tree(path: Path, roots: Sequence[Path], uri: str, loc: str) -> None:
    """Every file and directory below a dataset directory must resolve inside a data root: Spark follows links, so
    one link in a parquet directory would otherwise read a file from anywhere."""
    seen: set[str] = set()
    count = 0
    for top, dirs, files in os.walk(path, followlinks=True):
        real_top = os.path.realpath(top)
        if real_top in seen:  # a link back up the tree
            dirs[:] = []
            continue
        seen.add(real_top)
        for name in (*dirs, *files):
            count += 1
            if count > MAX_ENTRIES:
                raise ValidationFailed.at(loc, f"{uri!r} holds more than {MAX_ENTRIES} files; split the dataset")
            real = Path(os.path.realpath(os.path.join(top, name)))
            if not any(_inside(real, root) for root in roots):
                inner = os.path.relpath(os.path.join(top, name), path)
                raise ValidationFailed.at(
                    loc, f"{uri!r} holds {inner!r}, a link that leads outside the configured data roots"
                )


def resolve_uri(uri: str, *, roots: Sequence[Path], remote_prefixes: Sequence[str] = (), loc: str) -> str:
    """Turn a request's dataset URI into an absolute path inside a data root (symlinks followed, also those inside a
    dataset directory), or an allowed remote URI. Relative paths are tried against the working directory and each
    root."""
    parsed = urlparse(uri)
    if parsed.scheme and parsed.scheme != "file" and len(parsed.scheme) > 1:
        return _remote(uri, parsed.scheme, remote_prefixes, loc)
    raw = unquote(parsed.path) if parsed.scheme == "file" else uri
    if "\x00" in raw:
        raise ValidationFailed.at(loc, "the path contains a NUL byte")
    given = Path(raw)
    candidates = [given] if given.is_absolute() else [Path.cwd() / given]
    if not given.is_absolute():
        for root in roots:
            candidates.append(root / given)
            if given.parts and given.parts[0] == root.name:
                candidates.append(root.parent / given)
    inside_any = False
    for candidate in candidates:
        real = Path(os.path.realpath(candidate))
        if not any(_inside(real, root) for root in roots):
            continue
        inside_any = True
        try:
            if real.exists():
                if real.is_dir():
                    _check_tree(real, roots, uri, loc)
                return str(real)
        except OSError as exc:  # a name longer than the file system allows (ENAMETOOLONG), ...
            raise ValidationFailed.at(loc, f"{uri[:200]!r} is not a usable path: {exc.strerror}") from exc
    if not inside_any:
        roots_text = ", ".join(str(r) for r in roots)
        raise ValidationFailed.at(loc, f"{uri!r} lies outside the configured data roots ({roots_text})")
    raise _missing(uri, roots, loc)


def check_output_target(given: str, *, roots: Sequence[Path], loc: str = "output_uri") -> None:
    """A batch prediction's new output path must not be a symbolic link: a dangling one inside a root would have
    Spark write wherever it points. (The rest of the path's checks: ``inference._output_path``.)"""
    if "\x00" in given or not roots:
        return
    target = Path(given) if Path(given).is_absolute() else roots[-1] / given
    try:
        link = target.is_symlink()
    except OSError:
        return
    if link:
        raise ValidationFailed.at(loc, f"{given[:200]!r} is a symbolic link; name a new path inside the data roots")


def detect_format(path: str, given: Format | None, *, loc: str) -> Format:
    if given is not None:
        return given
    suffix = Path(urlparse(path).path).suffix.lower()
    if suffix in _EXTENSIONS:
        return _EXTENSIONS[suffix]
    if suffix == "" or Path(path).is_dir():
        return "parquet"
    raise ValidationFailed.at(
        loc, f"cannot tell the format of {path!r} from its name; set format to parquet, csv or json"
    )


def read_schema(spark: SparkSession, path: str, fmt: Format, options: dict[str, str], *, loc: str) -> dict[str, str]:
    """Column name -> Spark simple type name. A local parquet file (or flat directory of them) is read on the driver
    from its footer; anything else by Spark (CSV with header + inference, partitioned or remote data)."""
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


def _local_parquet_files(path: str) -> list[Path] | None:
    """The files of a local parquet file or flat directory of part files; None when Spark must read it
    (remote URIs, partition directories, nothing to read)."""
    if "://" in path and not path.startswith("file://"):
        return None
    base = Path(urlparse(path).path if path.startswith("file://") else path)
    try:
        if not base.is_dir():
            return [base] if base.is_file() else None
        entries = sorted(base.iterdir())
        if any(e.is_dir() and not e.name.startswith(("_", ".")) for e in entries):
            return None  # partition columns (key=value directories) come from the paths
        files = [e for e in entries if e.is_file() and not e.name.startswith(("_", ".")) and e.stat().st_size]
        return files or None
    except OSError:
        return None


def parquet_schema(path: str) -> dict[str, str] | None:
    """The schema Spark would infer for a local parquet file or a flat directory of part files, read from the first
    file's footer with pyarrow, so a request needs no Spark job: Spark's own inference runs one, which waits for a
    free task slot, and a barrier stage holds them all while it trains. None when Spark must decide (partition
    directories, remote URIs, a footer pyarrow cannot read or a type it cannot map)."""
    files = _local_parquet_files(path)
    if files is None:
        return None
    try:
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import from_arrow_type

        return {f.name: from_arrow_type(f.type).simpleString() for f in pq.read_schema(files[0])}
    except Exception:  # Spark reads it (and says what is wrong when it cannot)
        return None


LOCAL_SCAN_ROWS = 5_000_000
"""Up to this many rows, a request's look at one column of local parquet data (an array's length, the classes) is
read on the driver; beyond, a Spark job reads it."""


def local_parquet_column(path: str, fmt: str, options: dict[str, str], column: str) -> Any | None:
    """One column of small local parquet data as a pyarrow ChunkedArray, in file order, read without Spark (for
    the same reason as :func:`parquet_schema`); None when Spark must read it."""
    files = _local_parquet_files(path) if fmt == "parquet" and not options else None
    if files is None:
        return None
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if sum(pq.ParquetFile(f).metadata.num_rows for f in files) > LOCAL_SCAN_ROWS:
            return None
        return pa.chunked_array([c for f in files for c in pq.read_table(f, columns=[column]).column(column).chunks])
    except Exception:
        return None


NOT_LOCAL = object()
"""What :func:`local_parquet_first` answers when Spark must read the data."""


def local_parquet_first(path: str, fmt: str, options: dict[str, str], column: str) -> Any:
    """The first non-null value of a column of local parquet data (None when every value is null), reading batch
    by batch until one is found; :data:`NOT_LOCAL` when Spark must read it."""
    files = _local_parquet_files(path) if fmt == "parquet" and not options else None
    if files is None:
        return NOT_LOCAL
    try:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        for f in files:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=1024, columns=[column]):
                present = pc.drop_null(batch.column(0))
                if len(present):
                    return present[0].as_py()
        return None
    except Exception:
        return NOT_LOCAL


CORRUPT = "_corrupt_record"
SAMPLE_ROWS = 5
_ID = re.compile(r"^[0-9a-f]{32}$")


def _jsonable(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, int | str | bool) or value is None:
        return value
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, date | datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    if hasattr(value, "asDict"):
        return _jsonable(value.asDict(recursive=True))
    return str(value)


def reader_options(fmt: Format, options: dict[str, str]) -> dict[str, str]:
    """CSV has a header and inferred types unless told otherwise."""
    if fmt == "csv":
        return {"header": "true", "inferSchema": "true", **options}
    return dict(options)


def register_dataset(
    *, session: Session, spark: SparkSession, settings: Settings, body: DatasetCreate, owner: str = "anonymous"
) -> Dataset:
    """Read the schema, row count and a few sample rows with Spark and store them. Malformed CSV/JSON lines fail
    the registration (``bad_rows: fail``) with their count and the first ones, or are counted (``skip``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    path = resolve_uri(body.uri, roots=settings.data_roots, remote_prefixes=settings.remote_uri_prefixes, loc="uri")
    fmt = detect_format(path, body.format, loc="format")
    options = reader_options(fmt, body.options)
    try:
        df = spark.read.format(fmt).options(**options).load(path)
        bad_rows = 0
        if fmt in ("csv", "json"):
            schema = StructType([*df.schema.fields, StructField(CORRUPT, StringType(), True)])
            raw = (
                spark.read.format(fmt)
                .options(**{**options, "mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
                .schema(schema)
                .load(path)
                .cache()
            )
            try:
                counts = raw.agg(F.count(F.lit(1)).alias("n"), F.count(CORRUPT).alias("bad")).first()
                assert counts is not None
                rows, bad_rows = int(counts["n"]), int(counts["bad"])
                if bad_rows and body.bad_rows == "fail":
                    first = [r[CORRUPT] for r in raw.where(F.col(CORRUPT).isNotNull()).limit(SAMPLE_ROWS).collect()]
                    raise ValidationFailed.at(
                        "uri",
                        f"{bad_rows} of {rows} lines of {body.uri} do not parse as {fmt}; first ones: {first}. "
                        'Fix them, adjust options (sep, quote, escape), or register with bad_rows "skip".',
                        bad_rows=bad_rows,
                    )
            finally:
                raw.unpersist()
            rows -= bad_rows
        else:
            rows = df.count()
        sample = [_jsonable(r.asDict(recursive=True)) for r in df.limit(SAMPLE_ROWS).collect()]
    except ValidationFailed:
        raise
    except Exception as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValidationFailed.at("uri", f"Spark cannot read {body.uri!r} as {fmt}: {first_line[:500]}") from exc
    row = Dataset(
        id=uuid.uuid4().hex,
        name=body.name,
        uri=body.uri,
        resolved_uri=path,
        format=fmt,
        options=options,
        schema=[{"name": f.name, "type": f.dataType.simpleString(), "nullable": f.nullable} for f in df.schema.fields],
        row_count=rows,
        sample=sample,
        bad_rows=bad_rows,
        owner=owner,
        created_at=utcnow(),
    )
    session.add(row)
    session.flush()
    return row


def get_dataset(*, session: Session, dataset_id: str, owner: str | None = None) -> Dataset:
    """One dataset (of ``owner``'s; None: anyone's). Another owner's answers as an unknown one does."""
    row = session.get(Dataset, dataset_id)
    if row is None or (owner is not None and row.owner != owner):
        raise NotFound(f"No dataset with id {dataset_id!r}.")
    return row


def list_datasets(*, session: Session, limit: int = 100, owner: str | None = None) -> Sequence[Dataset]:
    stmt = select(Dataset) if owner is None else select(Dataset).where(Dataset.owner == owner)
    return session.scalars(stmt.order_by(Dataset.created_at.desc()).limit(limit)).all()


def registered(session: Session, uri: str) -> Dataset | None:
    """The registered dataset a request's ``uri`` names by id, if it does."""
    return session.get(Dataset, uri) if _ID.match(uri) else None


def check_reference(*, session: Session, uri: str, owner: str | None, roots: Sequence[Path], loc: str) -> None:
    """A request may name a registered dataset by id only when it is ``owner``'s (None: anyone's); another owner's
    id answers as an id that names nothing does (422, not in the data roots)."""
    row = registered(session, uri) if owner is not None else None
    if row is not None and row.owner != owner:
        raise _missing(uri, roots, loc)
