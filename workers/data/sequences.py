"""Sequence datasets: DataVec's sequence record functions (``DataVecSequenceDataSetFunction``,
``DataVecSequencePairDataSetFunction`` with its ``AlignmentMode``) for Spark DataFrames and Arrow batches.

Two halves that never mix:

* **Driver side** (:func:`to_sequence_frame`, :func:`check_sequences`): Spark DataFrame transformations that turn
  a dataset into ONE row per sequence. pyspark is imported inside the functions only.
* **Executor side** (:func:`pad_batch`): Arrow -> padded numpy arrays and masks, vectorised over the Arrow list
  offsets. stdlib, numpy and pyarrow only (no torch: the trainer wraps the arrays).

The frame between them (``to_sequence_frame``'s output) has these columns:

=============== ====================================================================================================
``sequence_id`` the input's sequence id (renamed from ``spec.sequence_id``)
``_x``          ``array<array<double>>``: the feature steps in step order, one inner array of F values per step
``_y``          ``last_step``: ``double`` (regression) / ``bigint`` (classification), one label per sequence;
                ``per_step``: ``array<double>`` / ``array<bigint>``, the label steps in step order
``_len``        ``int``: steps of the aligned sequence: ``max(len(_x), len(_y))`` for ``per_step``, ``len(_x)``
                for ``last_step`` (after ``max_length`` truncation)
``_bad``        ``string``: null for a usable sequence, otherwise why it is not (one of :data:`BAD_REASONS`)
=============== ====================================================================================================

Alignment needs no offset columns: the feature and label lengths are the lengths of ``_x`` and ``_y`` and the
mode is in the spec, so :func:`pad_batch` derives each offset from the Arrow list offsets.

Alignment and padding conventions (``spec.alignment``, DataVec's ``AlignmentMode``):

* ``ALIGN_START``: features and labels both start at step 0 of the sequence; the shorter one is padded at its
  end. In a padded batch the real steps sit at the START of the time axis (indices ``0 .. len-1``).
* ``ALIGN_END``: the last feature step and the last label step coincide; the shorter one is padded at its start.
  In a padded batch the real steps sit at the END of the time axis: the last real step of every sequence is at
  index ``T-1``, for features and labels alike (the many-to-one case reads the output at ``T-1``).
* ``EQUAL_LENGTH``: per-step labels must have as many steps as the features (a mismatch fails the job naming the
  sequence ids); padded like ``ALIGN_START``.

``max_length`` truncates features and per-step labels alike: ``ALIGN_END`` keeps the LAST ``max_length`` steps
(the ones next to the label of a many-to-one sequence), ``ALIGN_START`` and ``EQUAL_LENGTH`` keep the FIRST.
A ``last_step`` label is never truncated away: it is the label of the sequence.

``last_step`` labels are the label of the sequence's final label step: the label column of the row with the
largest step (rows layout), the scalar label column or the last element of an array label column (arrays layout),
or the last step of the separate label dataset. The alignment then decides only where the features are padded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

Layout = Literal["rows", "arrays"]
LabelKind = Literal["last_step", "per_step"]
Alignment = Literal["ALIGN_START", "ALIGN_END", "EQUAL_LENGTH"]
Task = Literal["classification", "regression"]
BadRows = Literal["fail", "skip"]

SEQUENCE_ID = "sequence_id"
X = "_x"
Y = "_y"
LENGTH = "_len"
BAD = "_bad"

NULL_ID = "null sequence id"
DUPLICATE_ID = "duplicate sequence id"
NULL_STEP = "null step"
DUPLICATE_STEP = "duplicate step"
NULL_FEATURE = "null or NaN feature"
RAGGED_FEATURES = "features of unequal length"
NULL_LABEL = "null or NaN label"
LABEL_RANGE = "label not a class index"
NO_FEATURES = "no feature steps"
NO_LABELS = "no label steps"
LENGTH_MISMATCH = "length mismatch"
BAD_REASONS = (
    NULL_ID,
    DUPLICATE_ID,
    NULL_STEP,
    DUPLICATE_STEP,
    NULL_FEATURE,
    RAGGED_FEATURES,
    NULL_LABEL,
    LABEL_RANGE,
    NO_FEATURES,
    NO_LABELS,
    LENGTH_MISMATCH,
)
"""Why a sequence is bad, in the order they are checked (a sequence reports the first that applies)."""

EXAMPLES = 5
_MAX_CLASS = 2**31  # class indices above this are nonsense, and casting them could overflow under ANSI mode
_NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double", "decimal")


@dataclass(frozen=True)
class SequenceSpec:
    """A sequence dataset: where the steps, features and labels are, and how features and labels align.

    ``layout="rows"``: one row per time step, keyed by ``sequence_id`` and ordered by ``step``; ``features`` are
    numeric columns and ``label`` a numeric column. ``layout="arrays"``: one row per sequence; ``features`` are
    ``array<numeric>`` columns of per-step values (equal lengths), or ONE ``array<array<numeric>>`` column
    (steps x features, each step ``num_features`` wide when given); ``label`` is a scalar or an array column.
    A separate label dataset (passed to :func:`to_sequence_frame`) has the same layout and names: rows
    ``(sequence_id, step, label)`` or ``(sequence_id, label)``.
    """

    features: tuple[str, ...]
    label: str
    layout: Layout = "rows"
    labels: LabelKind = "last_step"
    task: Task = "classification"
    num_classes: int | None = None
    alignment: Alignment = "ALIGN_END"
    max_length: int | None = None
    sequence_id: str = "sequence_id"
    step: str = "step"
    num_features: int | None = None
    """Width of a step in the nested arrays layout (one ``array<array<...>>`` column); None: not checked against
    a fixed width on the driver (every step of a sequence must still have the width of its first step)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", tuple(self.features))
        checks: list[tuple[bool, str]] = [
            (len(self.features) > 0, "features: at least one column"),
            (len(set(self.features)) == len(self.features), "features: a column appears twice"),
            (self.layout in ("rows", "arrays"), f"layout: rows or arrays, got {self.layout!r}"),
            (self.labels in ("last_step", "per_step"), f"labels: last_step or per_step, got {self.labels!r}"),
            (self.task in ("classification", "regression"), f"task: classification or regression, got {self.task!r}"),
            (
                self.alignment in ("ALIGN_START", "ALIGN_END", "EQUAL_LENGTH"),
                f"alignment: ALIGN_START, ALIGN_END or EQUAL_LENGTH, got {self.alignment!r}",
            ),
            (_positive(self.max_length), f"max_length: a positive integer, got {self.max_length!r}"),
            (_positive(self.num_features), f"num_features: a positive integer, got {self.num_features!r}"),
            (
                self.num_classes is None or (_positive(self.num_classes) and self.num_classes >= 2),
                f"num_classes: an integer of at least 2, got {self.num_classes!r}",
            ),
            (self.num_classes is None or self.task == "classification", "num_classes: only for classification"),
            (
                self.num_features is None or (self.layout == "arrays" and len(self.features) == 1),
                "num_features: only for one nested array column in the arrays layout",
            ),
            (
                self.label not in (*self.features, self.sequence_id, self.step),
                f"label: {self.label!r} is also a feature, the sequence id or the step",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def width(self) -> int | None:
        """Features per step when the spec alone tells (None for a nested arrays column without num_features)."""
        if self.num_features is not None:
            return self.num_features
        if self.layout == "rows" or len(self.features) > 1:
            return len(self.features)
        return None

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["features"] = list(self.features)
        return out

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> SequenceSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(obj) - known)
        if unknown:
            raise ValueError(f"unknown sequence setting {unknown[0]!r}; known: {', '.join(sorted(known))}")
        values = dict(obj)
        if isinstance(values.get("features"), str):
            raise ValueError("features: a list of column names, not one string")
        values["features"] = tuple(values.get("features") or ())
        return cls(**values)


def _positive(value: int | None) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0)


# --- driver side: Spark DataFrame transformations ------------------------------------------------------------


@dataclass(frozen=True)
class BadSequences:
    """What :func:`check_sequences` found: counts per reason and the first few sequence ids of each."""

    total: int
    bad: int
    by_reason: dict[str, int]
    examples: dict[str, list[Any]]

    @property
    def usable(self) -> int:
        return self.total - self.bad

    def describe(self) -> str:
        parts = [f"{n} with {reason} (e.g. {self.examples.get(reason, [])})" for reason, n in self.by_reason.items()]
        return f"{self.bad} of {self.total} sequences are bad: " + "; ".join(parts)


def to_sequence_frame(features_df: DataFrame, spec: SequenceSpec, labels_df: DataFrame | None = None) -> DataFrame:
    """One row per sequence: ``sequence_id``, ``_x``, ``_y``, ``_len``, ``_bad`` (see the module docstring).

    Lazy: nothing runs until the frame is used. Bad sequences are not dropped here but marked in ``_bad`` (their
    ``_x`` / ``_y`` are then unspecified); :func:`check_sequences` counts them and applies the fail/skip policy in
    one Spark job. Rows layout: one aggregation per dataset (``groupBy`` + ``collect_list`` of step structs +
    ``array_sort`` by step). Arrays layout: one aggregation by id as well, so duplicate ids are caught. With
    ``labels_df`` the two sides are joined on the sequence id (full outer: a sequence missing from either side is
    reported, never silently dropped).
    """
    from pyspark.sql import functions as F

    separate = labels_df is not None
    _require_columns(
        features_df,
        [spec.sequence_id, *([spec.step] if spec.layout == "rows" else []), *spec.features]
        + ([] if separate else [spec.label]),
        "features",
    )
    if spec.layout == "rows":
        side = _rows_side(features_df, spec, features=True, labels=not separate)
    else:
        side = _arrays_side(features_df, spec, features=True, labels=not separate)
    if labels_df is not None:
        _require_columns(
            labels_df, [spec.sequence_id, *([spec.step] if spec.layout == "rows" else []), spec.label], "labels"
        )
        if spec.layout == "rows":
            label_side = _rows_side(labels_df, spec, features=False, labels=True)
        else:
            label_side = _arrays_side(labels_df, spec, features=False, labels=True)
        side = side.select(SEQUENCE_ID, X, F.col("_why").alias("_why_x")).join(
            label_side.select(SEQUENCE_ID, Y, F.col("_why").alias("_why_y")), on=SEQUENCE_ID, how="full_outer"
        )
        why = F.coalesce(
            F.when(F.col(SEQUENCE_ID).isNull(), F.lit(NULL_ID)),
            F.col("_why_x"),
            F.col("_why_y"),
            F.when(F.col(X).isNull(), F.lit(NO_FEATURES)),
            F.when(F.col(Y).isNull(), F.lit(NO_LABELS)),
        )
        side = side.select(SEQUENCE_ID, X, Y, why.alias("_why"))

    x, y = F.col(X), F.col(Y)
    conditions: list[tuple[Column, str]] = [(F.size(x) == 0, NO_FEATURES)]
    if spec.labels == "per_step":
        conditions.append((F.size(y) == 0, NO_LABELS))
        if spec.alignment == "EQUAL_LENGTH":
            conditions.append((F.size(x) != F.size(y), LENGTH_MISMATCH))
    why = F.coalesce(F.col("_why"), *[F.when(c, F.lit(r)) for c, r in conditions])
    side = side.select(SEQUENCE_ID, X, Y, why.alias(BAD))
    good = F.col(BAD).isNull()

    if spec.max_length is not None:
        # Bad sequences keep their full length, so a report shows the lengths the data really has.
        x = F.when(good, _truncate(x, spec)).otherwise(x)
        if spec.labels == "per_step":
            y = F.when(good, _truncate(y, spec)).otherwise(y)
    length = F.greatest(F.size(x), F.size(y)) if spec.labels == "per_step" else F.size(x)
    if spec.task == "classification":
        cast = F.transform(y, lambda v: v.cast("bigint")) if spec.labels == "per_step" else y.cast("bigint")
        y = F.when(good, cast)  # guarded: ANSI mode fails a cast of the NaN of a bad row
    return side.select(SEQUENCE_ID, x.alias(X), y.alias(Y), length.cast("int").alias(LENGTH), BAD)


def check_sequences(
    frame: DataFrame, spec: SequenceSpec, *, bad_rows: BadRows = "fail", source: str = "the dataset"
) -> tuple[DataFrame, BadSequences]:
    """Count ``to_sequence_frame``'s bad sequences (one Spark job, a second one only when some are bad) and apply
    the policy: ``fail`` raises ``JobFailure("BAD_ROWS")`` with counts per reason and example ids; ``skip``
    returns the usable sequences (without ``_bad``) and the report for the caller to warn with. An
    ``EQUAL_LENGTH`` length mismatch always fails (``JobFailure("SEQUENCE_LENGTH_MISMATCH")``, naming the ids):
    it is a wrong alignment mode or a wrong pairing of the two datasets, not a bad row to drop."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from workers.context import JobFailure

    counts = {row[BAD]: int(row["n"]) for row in frame.groupBy(BAD).agg(F.count(F.lit(1)).alias("n")).collect()}
    total = sum(counts.values())
    by_reason = {r: counts[r] for r in sorted((r for r in counts if r is not None), key=_reason_order)}
    bad = sum(by_reason.values())
    examples: dict[str, list[Any]] = {}
    if bad:
        label_steps = F.size(Y) if spec.labels == "per_step" else F.lit(1)
        rank = F.row_number().over(Window.partitionBy(BAD).orderBy(F.col(SEQUENCE_ID).asc_nulls_first()))
        rows = (
            frame.where(F.col(BAD).isNotNull())
            .select(SEQUENCE_ID, BAD, F.size(X).alias("lx"), label_steps.alias("ly"), rank.alias("_rank"))
            .where(F.col("_rank") <= EXAMPLES)
            .orderBy(BAD, "_rank")
            .collect()
        )
        lengths = {}
        for row in rows:
            examples.setdefault(row[BAD], []).append(row[SEQUENCE_ID])
            lengths[row[SEQUENCE_ID]] = (row["lx"], row["ly"])
        if LENGTH_MISMATCH in by_reason:
            ids = ", ".join(
                f"{sid!r} ({lengths[sid][0]} feature steps, {lengths[sid][1]} label steps)"
                for sid in examples[LENGTH_MISMATCH]
            )
            raise JobFailure(
                "SEQUENCE_LENGTH_MISMATCH",
                f"{by_reason[LENGTH_MISMATCH]} sequences of {source} have per-step labels whose length differs from "
                f"their features, which alignment EQUAL_LENGTH forbids: {ids}"
                + (" ..." if by_reason[LENGTH_MISMATCH] > EXAMPLES else "")
                + ". Use ALIGN_START or ALIGN_END to pad the shorter one, or fix the pairing of the two datasets.",
            )
    report = BadSequences(total=total, bad=bad, by_reason=by_reason, examples=examples)
    if bad and bad_rows == "fail":
        raise JobFailure(
            "BAD_ROWS",
            f'{source}: {report.describe()}. Fix the data or set dataset.bad_rows to "skip" to drop them.',
        )
    return frame.where(F.col(BAD).isNull()).drop(BAD), report


def _reason_order(reason: str) -> int:
    return BAD_REASONS.index(reason) if reason in BAD_REASONS else len(BAD_REASONS)


def _require_columns(df: DataFrame, columns: list[str], what: str) -> None:
    dtypes = dict(df.dtypes)
    missing = [c for c in columns if c not in dtypes]
    if missing:
        raise ValueError(f"the {what} dataset has no column {missing[0]!r}; it has {', '.join(dtypes)}")


def _numeric(dtype: str) -> bool:
    return dtype.split("(", maxsplit=1)[0] in _NUMERIC


def _element_type(dtype: str) -> str:
    return dtype[len("array<") : -1] if dtype.startswith("array<") else ""


def _missing(v: Column) -> Column:
    from pyspark.sql import functions as F

    return v.isNull() | F.isnan(v)


def _bad_label(v: Column, spec: SequenceSpec) -> Column:
    """A label that is null or NaN, or (classification) not an integer in ``0 .. num_classes-1``."""
    from pyspark.sql import functions as F

    if spec.task == "regression":
        return _missing(v)
    upper = spec.num_classes if spec.num_classes is not None else _MAX_CLASS
    return _missing(v) | (v < 0) | (v >= upper) | (v != F.floor(v))


def _label_reason(bad_null: Column, bad_any: Column, spec: SequenceSpec) -> Column:
    """NULL_LABEL when ``bad_null``, else LABEL_RANGE when ``bad_any`` (classification only), else null."""
    from pyspark.sql import functions as F

    reason = F.when(bad_null, F.lit(NULL_LABEL))
    return reason.when(bad_any, F.lit(LABEL_RANGE)) if spec.task == "classification" else reason


def _rows_side(df: DataFrame, spec: SequenceSpec, *, features: bool, labels: bool) -> DataFrame:
    """Rows layout -> one row per sequence: ``sequence_id``, [``_x``], [``_y``], ``_why`` (first reason or null)."""
    from pyspark.sql import functions as F

    dtypes = dict(df.dtypes)
    for c in [*(spec.features if features else ()), *([spec.label] if labels else [])]:
        if not _numeric(dtypes[c]):
            raise ValueError(f"column {c!r} is {dtypes[c]}; the rows layout needs numeric feature and label columns")
    parts = [F.col(spec.step).alias("s")]
    if features:
        parts.append(F.array(*[F.col(c).cast("double") for c in spec.features]).alias("x"))
    if labels:
        parts.append(F.col(spec.label).cast("double").alias("y"))
    # array_sort orders the structs by their first field, the step; equal steps are caught below.
    steps = F.array_sort(F.collect_list(F.struct(*parts)))
    grouped = df.groupBy(F.col(spec.sequence_id).alias(SEQUENCE_ID)).agg(steps.alias("_steps"))
    s = F.col("_steps")
    step_numbers = F.transform(s, lambda e: e["s"])
    reasons = [
        F.when(F.col(SEQUENCE_ID).isNull(), F.lit(NULL_ID)),
        F.when(F.exists(s, lambda e: e["s"].isNull()), F.lit(NULL_STEP)),
        F.when(F.size(F.array_distinct(step_numbers)) != F.size(s), F.lit(DUPLICATE_STEP)),
    ]
    out = [F.col(SEQUENCE_ID)]
    if features:
        reasons.append(F.when(F.exists(s, lambda e: F.exists(e["x"], _missing)), F.lit(NULL_FEATURE)))
        out.append(F.transform(s, lambda e: e["x"]).alias(X))
    if labels:
        if spec.labels == "per_step":
            label = F.transform(s, lambda e: e["y"])
            reasons.append(
                _label_reason(F.exists(label, _missing), F.exists(label, lambda v: _bad_label(v, spec)), spec)
            )
        else:
            label = F.get(s, F.size(s) - 1)["y"]  # the label of the last step (null for no steps: never here)
            reasons.append(_label_reason(_missing(label), _bad_label(label, spec), spec))
        out.append(label.alias(Y))
    return grouped.select(*out, F.coalesce(*reasons).alias("_why"))


def _arrays_side(df: DataFrame, spec: SequenceSpec, *, features: bool, labels: bool) -> DataFrame:
    """Arrays layout -> one row per sequence: ``sequence_id``, [``_x``], [``_y``], ``_why`` (first reason or null)."""
    from pyspark.sql import functions as F

    dtypes = dict(df.dtypes)
    # One aggregation by id: a duplicated id would otherwise multiply the label join (or train twice).
    needed = [*(spec.features if features else ()), *([spec.label] if labels else [])]
    grouped = df.groupBy(F.col(spec.sequence_id).alias(SEQUENCE_ID)).agg(
        F.count(F.lit(1)).alias("_n"), F.first(F.struct(*[F.col(c) for c in needed])).alias("_r")
    )
    reasons = [
        F.when(F.col(SEQUENCE_ID).isNull(), F.lit(NULL_ID)),
        F.when(F.col("_n") > 1, F.lit(DUPLICATE_ID)),
    ]
    out = [F.col(SEQUENCE_ID)]
    if features:
        x, why = _arrays_features(spec, dtypes)
        reasons.append(why)
        out.append(x.alias(X))
    if labels:
        y, why = _arrays_label(spec, dtypes[spec.label])
        reasons.append(why)
        out.append(y.alias(Y))
    return grouped.select(*out, F.coalesce(*reasons).alias("_why"))


def _arrays_features(spec: SequenceSpec, dtypes: dict[str, str]) -> tuple[Column, Column]:
    from pyspark.sql import functions as F

    element = {c: _element_type(dtypes[c]) for c in spec.features}
    nested = [c for c in spec.features if element[c].startswith("array<")]
    cols = [F.col("_r")[c] for c in spec.features]
    if nested:
        if len(spec.features) > 1:
            raise ValueError(f"column {nested[0]!r} is {dtypes[nested[0]]}: a nested array must be the only feature")
        if not _numeric(_element_type(element[nested[0]])):
            raise ValueError(f"column {nested[0]!r} is {dtypes[nested[0]]}; it needs numeric values")
        c = cols[0]
        width = F.lit(spec.num_features) if spec.num_features is not None else F.size(F.get(c, 0))
        null = c.isNull() | F.exists(c, lambda r: r.isNull() | F.exists(r, _missing))
        ragged = F.exists(c, lambda r: F.size(r) != width)
        x = F.transform(c, lambda r: F.transform(r, lambda v: v.cast("double")))
        return x, F.when(null, F.lit(NULL_FEATURE)).when(ragged, F.lit(RAGGED_FEATURES))
    for name in spec.features:
        if not _numeric(element[name]):
            raise ValueError(f"column {name!r} is {dtypes[name]}; the arrays layout needs array<numeric> features")
    null = cols[0].isNull()
    for c in cols[1:]:
        null = null | c.isNull()
    for c in cols:
        null = null | F.exists(c, _missing)
    ragged = F.lit(False)
    for c in cols[1:]:
        ragged = ragged | (F.size(c) != F.size(cols[0]))
    first, rest = cols[0], cols[1:]
    x = F.transform(first, lambda v, i: F.array(v.cast("double"), *[F.get(c, i).cast("double") for c in rest]))
    return x, F.when(null, F.lit(NULL_FEATURE)).when(ragged, F.lit(RAGGED_FEATURES))


def _arrays_label(spec: SequenceSpec, dtype: str) -> tuple[Column, Column]:
    from pyspark.sql import functions as F

    c = F.col("_r")[spec.label]
    element = _element_type(dtype)
    if not _numeric(element or dtype):
        raise ValueError(f"column {spec.label!r} is {dtype}; the label must be numeric or an array of numbers")
    if spec.labels == "per_step":
        if not element:
            raise ValueError(f"labels per_step need an array label column; {spec.label!r} is {dtype}")
        y = F.transform(c, lambda v: v.cast("double"))
        return y, _label_reason(c.isNull() | F.exists(y, _missing), F.exists(y, lambda v: _bad_label(v, spec)), spec)
    y = F.get(c, F.size(c) - 1).cast("double") if element else c.cast("double")
    reason = _label_reason(_missing(y), _bad_label(y, spec), spec)
    if element:  # an empty label array has no last step: report it as such, not as a null label
        return y, F.when(F.size(c) == 0, F.lit(NO_LABELS)).otherwise(reason)
    return y, reason


def _truncate(arr: Column, spec: SequenceSpec) -> Column:
    """The last ``max_length`` elements (ALIGN_END) or the first (ALIGN_START, EQUAL_LENGTH)."""
    from pyspark.sql import functions as F

    n = F.lit(spec.max_length)
    if spec.alignment == "ALIGN_END":
        return F.slice(arr, F.greatest(F.size(arr) - n + 1, F.lit(1)), n)
    return F.slice(arr, F.lit(1), n)


# --- executor side: Arrow -> padded numpy --------------------------------------------------------------------


@dataclass(frozen=True)
class SequenceArrays:
    """A padded batch. Padding is 0 (False in the masks); see the module docstring for where real steps sit."""

    x: np.ndarray
    """float32 (n, T, F)"""
    feature_mask: np.ndarray
    """bool (n, T): True on real feature steps"""
    y: np.ndarray
    """last_step: (n,); per_step: (n, T). int64 class indices or float32 values."""
    label_mask: np.ndarray | None
    """per_step: bool (n, T), True where a label exists; None for last_step labels (one per sequence)."""
    lengths: np.ndarray
    """int64 (n,): steps of each aligned sequence (the ``_len`` column)"""
    sequence_id: np.ndarray | None
    """the ``sequence_id`` column when the batch has one"""
    alignment: Alignment

    def __len__(self) -> int:
        return int(self.x.shape[0])

    @property
    def last_index(self) -> np.ndarray:
        """int64 (n,): time index of each sequence's last real feature step (where a many-to-one model reads its
        output): ``T-1`` for ALIGN_END, ``feature steps - 1`` otherwise (-1 for an empty batch row)."""
        n, t = self.feature_mask.shape
        if self.alignment == "ALIGN_END":
            return np.full(n, t - 1, dtype=np.int64)
        return self.feature_mask.sum(axis=1).astype(np.int64) - 1


def pad_batch(
    table_or_batches: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch],
    spec: SequenceSpec,
    *,
    pad_to: int | None = None,
) -> SequenceArrays:
    """Pad the sequences of ``to_sequence_frame`` rows (as Arrow) to ``T`` steps: the longest sequence, or
    ``pad_to`` (an error when a sequence is longer: truncation is ``max_length``'s job, on the driver).

    No per-row Python: the (sequence, time) index of every step comes from the Arrow list offsets, and one
    fancy-indexed assignment scatters all steps. Raises ValueError on rows marked bad, nulls, steps of unequal
    width, class labels outside ``0..num_classes-1`` and (EQUAL_LENGTH) per-step labels of another length.
    """
    table = _as_table(table_or_batches)
    names = set(table.column_names)
    if X not in names or Y not in names:
        raise ValueError(f"a sequence batch needs columns {X} and {Y}; got {', '.join(table.column_names)}")
    # Copies, not zero-copy views of Arrow buffers: torch.from_numpy wants writable arrays.
    ids = np.array(table.column(SEQUENCE_ID).to_numpy(zero_copy_only=False)) if SEQUENCE_ID in names else None
    if BAD in names:
        bad = table.column(BAD)
        if bad.null_count != len(bad):
            raise ValueError(f"{len(bad) - bad.null_count} sequences in the batch are marked bad: drop them first")
    x_col = _list_column(table, X)
    n = len(x_col)
    lx = np.diff(np.asarray(x_col.offsets, dtype=np.int64))
    steps = x_col.flatten()  # the step lists of this (possibly sliced) array only
    if steps.null_count:
        raise ValueError(f"{X} has null steps")
    widths = np.diff(np.asarray(steps.offsets, dtype=np.int64))
    values = steps.flatten()
    if values.null_count:
        raise ValueError(f"{X} has null values")
    width = spec.width if spec.width is not None else (int(widths[0]) if widths.size else 0)
    odd = np.flatnonzero(widths != width)
    if odd.size:
        raise ValueError(f"{X}: a step has {int(widths[odd[0]])} values, expected {width} features per step")
    x_flat = values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(len(widths), width)

    y_type = np.int64 if spec.task == "classification" else np.float32
    if spec.labels == "per_step":
        y_col = _list_column(table, Y)
        ly = np.diff(np.asarray(y_col.offsets, dtype=np.int64))
        y_values = y_col.flatten()
        if y_values.null_count:
            raise ValueError(f"{Y} has null labels")
        y_flat = y_values.to_numpy(zero_copy_only=False)
        if spec.alignment == "EQUAL_LENGTH" and np.any(lx != ly):
            odd = np.flatnonzero(lx != ly)[:EXAMPLES]
            which = [ids[i] if ids is not None else f"row {i}" for i in odd]
            raise ValueError(f"EQUAL_LENGTH: feature and label steps differ for sequences {which}")
        lengths = np.maximum(lx, ly)
    else:
        y_arr = table.column(Y)
        if y_arr.null_count:
            raise ValueError(f"{Y} has null labels")
        y_flat = y_arr.to_numpy()
        ly = None
        lengths = lx
    y_flat = _check_labels(y_flat, spec).astype(y_type)  # a copy (see ids)

    if LENGTH in names:
        declared = table.column(LENGTH).to_numpy(zero_copy_only=False).astype(np.int64)
        if not np.array_equal(declared, lengths):
            raise ValueError(f"{LENGTH} disagrees with the steps in {X}/{Y}: was the frame made with another spec?")
    longest = int(lengths.max()) if n else 0
    if pad_to is not None and pad_to < longest:
        raise ValueError(f"pad_to={pad_to} but a sequence has {longest} steps (set max_length to truncate)")
    t = longest if pad_to is None else pad_to

    x = np.zeros((n, t, width), dtype=np.float32)
    feature_mask = np.zeros((n, t), dtype=bool)
    rows, times = _step_index(lx, t, spec.alignment)
    x[rows, times] = x_flat
    feature_mask[rows, times] = True
    if ly is None:
        return SequenceArrays(x, feature_mask, y_flat, None, lengths, ids, spec.alignment)
    y = np.zeros((n, t), dtype=y_type)
    label_mask = np.zeros((n, t), dtype=bool)
    rows, times = _step_index(ly, t, spec.alignment)
    y[rows, times] = y_flat
    label_mask[rows, times] = True
    return SequenceArrays(x, feature_mask, y, label_mask, lengths, ids, spec.alignment)


def _as_table(data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch]) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    batches = list(data)
    if not batches:
        raise ValueError("no record batches (and so no schema): pass an empty Table instead")
    return pa.Table.from_batches(batches)


def _list_column(table: pa.Table, name: str) -> pa.Array:
    column = table.column(name)
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        raise ValueError(f"column {name} is {column.type}, expected a list (check the spec's labels setting)")
    array = column.combine_chunks()
    if array.null_count:
        raise ValueError(f"column {name} has null rows")
    return array


def _step_index(lengths: np.ndarray, t: int, alignment: Alignment) -> tuple[np.ndarray, np.ndarray]:
    """(row, time) of every step of ragged sequences of these lengths, flattened in order: ALIGN_END puts the
    last step of each at ``t-1``, the other modes the first at 0."""
    total = int(lengths.sum())
    rows = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    starts = np.cumsum(lengths) - lengths
    position = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
    if alignment == "ALIGN_END":
        position += np.repeat(t - lengths, lengths)
    return rows, position


def _check_labels(labels: np.ndarray, spec: SequenceSpec) -> np.ndarray:
    if spec.task != "classification" or labels.size == 0:
        return labels
    if labels.dtype.kind == "f" and not np.all(np.isfinite(labels) & (labels == np.floor(labels))):
        raise ValueError(f"{Y}: class labels must be whole numbers")
    if labels.min() < 0 or (spec.num_classes is not None and labels.max() >= spec.num_classes):
        limit = f"0..{spec.num_classes - 1}" if spec.num_classes is not None else "0 and above"
        raise ValueError(f"{Y}: class labels outside {limit}")
    return labels
