"""A dataset as the job runner hands it to a family driver: already resolved and checked on the driver."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Task = Literal["classification", "regression"]
CORRUPT = "_corrupt_record"
"""The column ``read_dataframe(..., malformed=True)`` adds to CSV / JSON data: the text of a line that does not
parse (too few or too many fields, an unclosed quote), null on a good line."""


@dataclass(frozen=True)
class ResolvedDataset:
    path: str
    """An absolute path or URI that Spark on the executors can read."""
    format: Literal["parquet", "csv", "json"]
    features: tuple[str, ...]
    label: str | None
    task: Task | None
    num_classes: int | None = None
    bad_rows: Literal["fail", "skip"] = "fail"
    key: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    extra_labels: tuple[str, ...] = ()
    """More label columns (a regression's label range: DataVec's labelIndexFrom..labelIndexTo)."""
    weight: str | None = None
    """A per-row weight column (>= 0) that scales the row's loss."""
    normalize: Literal["standardize", "minmax", "image"] | None = None
    validation_fraction: float | None = None
    """Held out (seeded) when no validation set is given; None leaves it to the family's default."""
    split_seed: int = 7
    sequence: dict[str, Any] | None = None
    """A :class:`workers.data.sequences.SequenceSpec` as a dict when the rows form sequences."""
    labels_path: str | None = None
    """A separate label dataset of a sequence dataset (same format), joined by sequence id."""
    categorical: tuple[str, ...] = ()
    """Features that are categories, one-hot encoded by the family driver (:mod:`workers.data.categories`)."""
    column_types: dict[str, str] = field(default_factory=dict)
    """The feature columns' Spark types, as planned: a trained model's signature records them."""

    @property
    def label_columns(self) -> tuple[str, ...]:
        return (self.label, *self.extra_labels) if self.label else ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "features": list(self.features),
            "label": self.label,
            "task": self.task,
            "num_classes": self.num_classes,
            "bad_rows": self.bad_rows,
            "key": self.key,
            "options": dict(self.options),
            "extra_labels": list(self.extra_labels),
            "weight": self.weight,
            "normalize": self.normalize,
            "validation_fraction": self.validation_fraction,
            "split_seed": self.split_seed,
            "sequence": self.sequence,
            "labels_path": self.labels_path,
            "categorical": list(self.categorical),
        }


def read_dataframe(spark: SparkSession, ds: ResolvedDataset, *, malformed: bool = False) -> DataFrame:
    """The dataset as Spark reads it (CSV: a header and inferred types unless its options say otherwise).
    ``malformed``: CSV / JSON data gets the :data:`CORRUPT` column, so that a line with too few or too many fields
    is a bad row (:mod:`workers.data.clean`) rather than a row padded with nulls or cut short; not when the
    options choose their own ``mode``. Options that are not reader options of the format (a Hadoop setting, which
    Spark copies into the configuration it reads with) fail the job: requests are refused them, but a plan stored
    before that check carries them (:mod:`workers.data.reader_options`)."""
    _check_options(ds)
    options = {"header": "true", "inferSchema": "true", **ds.options} if ds.format == "csv" else ds.options
    footer = _footer_schema(ds) if ds.format == "parquet" and not options else None
    if footer is not None:  # Spark would run a job to read the same footer
        return spark.read.schema(footer).parquet(ds.path)
    df = spark.read.format(ds.format).options(**options).load(ds.path)
    if not malformed or ds.format not in ("csv", "json") or "mode" in options:
        return df
    schema = type(df.schema).fromJson(df.schema.jsonValue())  # a copy: add() changes the schema it is called on
    if CORRUPT not in df.columns:  # JSON inference adds it when a line does not parse
        schema = schema.add(CORRUPT, "string", True)
    permissive = {**options, "mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
    return spark.read.format(ds.format).options(**permissive).schema(schema).load(ds.path)


def _check_options(ds: ResolvedDataset) -> None:
    from workers.context import JobFailure
    from workers.data.reader_options import problem

    wrong = problem(ds.format, ds.options)
    if wrong is not None:
        raise JobFailure("INVALID_REQUEST", f"dataset.options: {wrong}. The job was queued before reader options were "
                         "checked: submit it again without that option.")  # fmt: skip


def _footer_schema(ds: ResolvedDataset) -> str | None:
    """The Spark schema (DDL) of a local parquet file (or a flat directory of part files) from its footer, read here
    with pyarrow; None when Spark should infer it (remote data, subdirectories such as partitions, types other than
    numbers, booleans, strings and arrays of numbers)."""
    import os

    if "://" in ds.path and not ds.path.startswith("file://"):
        return None
    path = ds.path.removeprefix("file://")
    try:
        if os.path.isdir(path):
            entries = sorted(e for e in os.listdir(path) if not e.startswith(("_", ".")))
            if any(os.path.isdir(os.path.join(path, e)) for e in entries) or not entries:
                return None
            path = os.path.join(path, entries[0])
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = {
            pa.int8(): "tinyint", pa.int16(): "smallint", pa.int32(): "int", pa.int64(): "bigint",
            pa.float32(): "float", pa.float64(): "double", pa.bool_(): "boolean", pa.string(): "string",
        }  # fmt: skip

        def ddl(t: pa.DataType) -> str | None:
            if pa.types.is_list(t):
                inner = ddl(t.value_type)
                return f"array<{inner}>" if inner else None
            return names.get(t)

        fields = [(f.name, ddl(f.type)) for f in pq.read_schema(path)]
        if not fields or any(t is None or "`" in name for name, t in fields):
            return None
        return ", ".join(f"`{name}` {t}" for name, t in fields)
    except Exception:  # Spark reads it, and says what is wrong when it cannot
        return None
