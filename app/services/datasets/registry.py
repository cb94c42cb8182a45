"""The registry of named datasets (``POST /datasets``): a URI read once (schema, row count, a few sample rows,
malformed lines counted), stored with its owner, and named by its id in later requests.

No Spark job runs in the request (app/services/datasets/deferred.py says why): local parquet, CSV and JSON lines
are read on the driver (app/services/datasets/schema.py, sample.py). What the driver does not read itself (remote
URIs, reader options, partition values Spark types, text files over ``summary.SUMMARY_BYTES``) is registered at
once with its summary ``pending``, and :func:`read_summary` reads it with Spark after the answer."""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable, Sequence
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import NotFound, ValidationFailed
from app.core.settings import Settings
from app.db.base import utcnow
from app.db.models import Dataset
from app.schemas.datasets import DatasetCreate
from app.services.cursors import decode_cursor, encode_cursor
from app.services.datasets.footers import SparkRefuses, check_names
from app.services.datasets.paths import check_options, detect_format, missing, resolve_uri
from app.services.datasets.schema import (
    NUMERIC_TYPES,
    infers_partition_types,
    local_summary,
    local_text,
    reader_options,
)
from app.services.datasets.sniff import doubled_quotes, not_parquet, not_parquet_words, not_text
from app.services.datasets.summary import quoted_line_break
from workers.data.spec import CORRUPT

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SAMPLE_ROWS = 5
COMPLETE, PENDING, FAILED = "complete", "pending", "failed"
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


def register_dataset(
    *, session: Session, spark: SparkSession, settings: Settings, body: DatasetCreate, owner: str = "anonymous"
) -> Dataset:
    """Read the schema, row count and a few sample rows on the driver and store them; malformed CSV/JSON lines
    fail the registration (``bad_rows: fail``) with their count and the first ones, or are counted (``skip``).
    Data the driver does not read itself is stored with its summary ``pending``: the caller has
    :func:`read_summary` read it once the row is committed."""
    path = resolve_uri(body.uri, roots=settings.data_roots, remote_prefixes=settings.remote_uri_prefixes, loc="uri")
    fmt = detect_format(path, body.format, loc="format")
    options = reader_options(fmt, check_options(fmt, body.options, loc="options"))
    problem = not_text(path, fmt, options) if fmt in ("csv", "json") else None
    if problem is not None:  # an empty file, or parquet named as text: Spark's own error said neither
        raise ValidationFailed.at("uri", f"Spark cannot read {body.uri!r} as {fmt}: {problem}")
    try:
        local = local_summary(
            path, fmt, options, sample_rows=SAMPLE_ROWS, infer_partition_types=infers_partition_types(spark)
        )
        if local is not None and fmt == "json":
            check_names((column["name"] for column in local[0]), "the data")
    except SparkRefuses as exc:
        raise ValidationFailed.at("uri", f"Spark cannot read {body.uri!r} as {fmt}: {exc}") from exc
    unreadable = not_parquet(path) if local is None and fmt == "parquet" else None
    if unreadable is not None:
        raise ValidationFailed.at("uri", f"Spark cannot read {body.uri!r} as parquet: {not_parquet_words(unreadable)}")
    columns, rows, sample, bad_rows, first_bad = local if local is not None else ([], None, [], 0, [])
    if bad_rows and body.bad_rows == "fail":
        raise _malformed(body, fmt, bad_rows, (rows or 0) + bad_rows, first_bad)
    row = Dataset(
        id=uuid.uuid4().hex,
        name=body.name,
        uri=body.uri,
        resolved_uri=path,
        format=fmt,
        options=options,
        schema=columns,
        row_count=rows,
        sample=[_jsonable(r) for r in sample],
        bad_rows=bad_rows,
        owner=owner,
        created_at=utcnow(),
        summary=COMPLETE if local is not None else PENDING,
        bad_rows_policy=body.bad_rows,
        warnings=[w for w in (doubled_quotes(path, fmt, options), _same_name(session, body.name, owner)) if w],
    )
    session.add(row)
    session.flush()
    return row


def _same_name(session: Session, name: str | None, owner: str) -> str | None:
    """A warning when ``owner`` already has a dataset of this name: names are labels, and both are kept."""
    if not name:
        return None
    other = session.scalars(
        select(Dataset.id).where(Dataset.name == name, Dataset.owner == owner).order_by(Dataset.created_at.desc())
    ).first()
    if other is None:
        return None
    return f"another dataset is named {name!r} (id {other}): a name is a label, the id is the key; both are kept"


def read_summary(
    *, db: sessionmaker[Session], spark: SparkSession, dataset_id: str, stopping: Callable[[], bool]
) -> None:
    """Read a ``pending`` registration's summary with Spark (after the answer: a Spark job waits for a free task
    slot) and store it, or store why it failed (``failed``, with the words the request would have answered). A
    read cut short by the driver stopping leaves it ``pending`` (:func:`read_pending`, at the next start)."""
    with db() as session:
        row = session.get(Dataset, dataset_id)
        if row is None or row.summary != PENDING:
            return
        path, fmt, options = row.resolved_uri, row.format, dict(row.options)
        body = DatasetCreate(uri=row.uri, bad_rows=row.bad_rows_policy)  # what _read says and decides by
    sc = spark.sparkContext
    sc.setJobGroup(f"dataset-{dataset_id}", f"sparktrain: the summary of dataset {dataset_id}")  # Spark's UI says it
    try:
        check_options(fmt, options, loc="options")  # stored before the allow-list: never given to Spark
        columns, rows, sample, bad_rows = _read(spark, body, path, fmt, options)
        done: dict[str, Any] = {"schema": columns, "row_count": rows, "sample": [_jsonable(r) for r in sample],
                                "bad_rows": bad_rows, "summary": COMPLETE}  # fmt: skip
    except ValidationFailed as exc:
        if stopping():
            return
        done = {"summary": FAILED, "summary_error": exc.detail, "bad_rows": exc.extra.get("bad_rows", 0)}
    finally:
        sc._jsc.clearJobGroup()
    with db() as session:
        row = session.get(Dataset, dataset_id)
        if row is not None and row.summary == PENDING:
            for key, value in done.items():
                setattr(row, key, value)
            session.commit()


def read_pending(*, db: sessionmaker[Session], spark: SparkSession, stopping: Callable[[], bool]) -> int:
    """Read every summary still ``pending``, oldest first: a driver's start calls it after the answer's thread is
    up, for the registrations a stopped driver left unread. Drivers that start together may both read one; the
    second finds it no longer pending, or writes the same summary. Returns how many were read."""
    with db() as session:
        ids = list(session.scalars(select(Dataset.id).where(Dataset.summary == PENDING).order_by(Dataset.created_at)))
    for dataset_id in ids:
        if stopping():
            break
        read_summary(db=db, spark=spark, dataset_id=dataset_id, stopping=stopping)
    return len(ids)


def _malformed(
    body: DatasetCreate, fmt: str, bad_rows: int, lines: int, first: list[Any], *, line_break: bool = False
) -> ValidationFailed:
    """The 422 of malformed lines; ``line_break``: a quoted value of the CSV holds a line break (Spark reads it as
    lines of their own unless ``multiLine`` is true)."""
    fix = "adjust options (sep, quote, escape), " if fmt == "csv" else ""
    if line_break:
        fix = 'set options.multiLine "true" (a quoted value holds a line break), '
    return ValidationFailed.at(
        "uri",
        f"{bad_rows} of {lines} lines of {body.uri} do not parse as {fmt}; first ones: {first}. "
        f'Fix them, {fix}or register with bad_rows "skip".',
        bad_rows=bad_rows,
    )


def _line_break(path: str, fmt: str, options: dict[str, str]) -> bool:
    """Whether local CSV data read line by line has a quoted value with a line break in it."""
    multiline = {k.lower(): v for k, v in options.items()}.get("multiline", "false").lower() == "true"
    found = local_text(path, options) if fmt == "csv" and not multiline else None
    return found is not None and quoted_line_break(found[0], options)


def _read(
    spark: SparkSession, body: DatasetCreate, path: str, fmt: str, options: dict[str, str]
) -> tuple[list[dict[str, Any]], int, list[dict[str, Any]], int]:
    """(columns, usable rows, sample rows, malformed lines) as Spark reads the data."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    try:
        df = spark.read.format(fmt).options(**options).load(path)
        if CORRUPT in df.columns:  # JSON inference adds it when a line does not parse: not a column of the data
            df = df.drop(CORRUPT)
        bad_rows = 0
        not_numbers: dict[str, int] = {}
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
                counts = raw.agg(
                    F.count(F.lit(1)).alias("n"), F.count(CORRUPT).alias("bad"), *_not_numbers(df, CORRUPT)
                ).first()
                assert counts is not None
                rows, bad_rows = int(counts["n"]), int(counts["bad"])
                not_numbers = {name: int(counts[f"_nan_{i}"]) for i, name in enumerate(df.columns)
                               if f"_nan_{i}" in counts.asDict()}  # fmt: skip
                if bad_rows and body.bad_rows == "fail":
                    first = [r[CORRUPT] for r in raw.where(F.col(CORRUPT).isNotNull()).limit(SAMPLE_ROWS).collect()]
                    raise _malformed(body, fmt, bad_rows, rows, first, line_break=_line_break(path, fmt, options))
            finally:
                raw.unpersist()
            rows -= bad_rows
        else:
            rows = df.count()
        sample = [r.asDict(recursive=True) for r in df.limit(SAMPLE_ROWS).collect()]
    except ValidationFailed:
        raise
    except Exception as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValidationFailed.at("uri", f"Spark cannot read {body.uri!r} as {fmt}: {first_line[:500]}") from exc
    columns = [
        {
            "name": f.name,
            "type": f.dataType.simpleString(),
            "nullable": f.nullable,
            "not_numbers": not_numbers.get(f.name),
        }
        for f in df.schema.fields
    ]
    return columns, rows, sample, bad_rows


def _not_numbers(df: Any, corrupt: str) -> list[Any]:
    """Per column of CSV / JSON data (in the pass that counts the lines): how many values of a parsed line do not
    parse as numbers (``_nan_<position>``). A numeric column has none, so only string columns are counted: a
    column with a few (``n/a`` among 600 fares) can still train as numbers, each such row a bad row; a text column
    has them all."""
    from pyspark.sql import functions as F

    counted = []
    for i, (name, dtype) in enumerate(df.dtypes):
        col = F.col(f"`{name}`")
        if dtype == "string" and name != corrupt:
            unparsed = F.col(corrupt).isNull() & col.isNotNull() & col.try_cast("double").isNull()
            counted.append(F.count(F.when(unparsed, 1)).alias(f"_nan_{i}"))
        elif dtype in NUMERIC_TYPES:
            counted.append(F.lit(0).alias(f"_nan_{i}"))
    return counted


def get_dataset(*, session: Session, dataset_id: str, owner: str | None = None) -> Dataset:
    """One dataset (of ``owner``'s; None: anyone's). Another owner's answers as an unknown one does."""
    row = session.get(Dataset, dataset_id)
    if row is None or (owner is not None and row.owner != owner):
        raise NotFound(f"No dataset with id {dataset_id!r}.")
    return row


def list_datasets(*, session: Session, limit: int = 100, owner: str | None = None) -> Sequence[Dataset]:
    return page_datasets(session=session, limit=limit, owner=owner)[0]


def page_datasets(
    *, session: Session, limit: int = 100, cursor: str | None = None, owner: str | None = None
) -> tuple[Sequence[Dataset], str | None]:
    """Newest first (``owner``'s; None: anyone's); a page and the cursor of the next one (None at the end), cursors
    like ``GET /jobs``' (a bad one, or one of another list, is a 400)."""
    stmt = select(Dataset) if owner is None else select(Dataset).where(Dataset.owner == owner)
    if cursor:
        created, dataset_id = decode_cursor(cursor, "datasets")
        stmt = stmt.where(
            or_(Dataset.created_at < created, and_(Dataset.created_at == created, Dataset.id < dataset_id))
        )
    rows = session.scalars(stmt.order_by(Dataset.created_at.desc(), Dataset.id.desc()).limit(limit + 1)).all()
    page = rows[:limit]
    return page, encode_cursor(page[-1].created_at, page[-1].id, "datasets") if len(rows) > limit else None


def registered(session: Session, uri: str) -> Dataset | None:
    """The registered dataset a request's ``uri`` names by id, if it does."""
    return session.get(Dataset, uri) if _ID.match(uri) else None


def check_reference(*, session: Session, uri: str, owner: str | None, roots: Sequence[Path], loc: str) -> None:
    """A request may name a registered dataset by id only when it is ``owner``'s (None: anyone's); another owner's
    id answers as an id that names nothing does (422, not in the data roots)."""
    row = registered(session, uri) if owner is not None else None
    if row is not None and row.owner != owner:
        raise missing(uri, roots, loc)
