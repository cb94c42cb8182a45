"""Sequence datasets, driver side: Spark DataFrame transformations (:func:`to_sequence_frame`,
:func:`check_sequences`) that turn a dataset into ONE row per sequence. pyspark is imported inside the functions
only.

The frame between the two halves (``to_sequence_frame``'s output) has these columns:

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

``max_length`` truncates features and per-step labels alike: ``ALIGN_END`` keeps the LAST ``max_length`` steps
(the ones next to the label of a many-to-one sequence), ``ALIGN_START`` and ``EQUAL_LENGTH`` keep the FIRST.
A ``last_step`` label is never truncated away: it is the label of the sequence.

``last_step`` labels are the label of the sequence's final label step: the label column of the row with the
largest step (rows layout), the scalar label column or the last element of an array label column (arrays layout),
or the last step of the separate label dataset. The alignment then decides only where the features are padded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workers.data.sequences.spec import (
    BAD,
    BAD_REASONS,
    DUPLICATE_ID,
    DUPLICATE_STEP,
    EXAMPLES,
    LABEL_RANGE,
    LENGTH,
    LENGTH_MISMATCH,
    NO_FEATURES,
    NO_LABELS,
    NULL_FEATURE,
    NULL_ID,
    NULL_LABEL,
    NULL_STEP,
    RAGGED_FEATURES,
    SEQUENCE_ID,
    BadRows,
    SequenceSpec,
    X,
    Y,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

_MAX_CLASS = 2**31  # class indices above this are nonsense, and casting them could overflow under ANSI mode
_NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double", "decimal")


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
