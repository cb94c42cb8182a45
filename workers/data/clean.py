"""Bad rows (docs/datasets.md): by default the job fails with their count and the first few; ``skip`` drops them
and reports how many. Never a silent drop. Counting and checking take one pass over the data.

A row is bad when a line of a CSV / JSON file does not parse (too few or too many fields: the reader's corrupt
record column, :data:`workers.data.spec.CORRUPT`), when a column the request declares numeric (a feature, a
regression's label, the weight) holds a token that is not a number, or when such a value is null, NaN or infinite.
Why parse here: Spark's CSV and JSON schema inference makes a numeric column with one ``n/a`` in it a string
column; the request accepts it (docs/datasets.md) and each row then says for itself whether it is a number.
Every bad row carries its first reason (``not a number: 'n/a' (distance)``), which the failure shows."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from workers.context import JobContext, JobFailure
from workers.data.spec import CORRUPT, ResolvedDataset
from workers.numbers import have, n_rows

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

EXAMPLES = 5
REASON = "_reason"
_FLOATS = ("double", "float")
_SHOWN = 200
"""At most this many characters of a malformed line in a reason."""


def numeric_columns(ds: ResolvedDataset) -> tuple[str, ...]:
    """The columns the request declares numeric: the features (but categorical ones), a regression's labels and the
    weight. A classification label is not one of them: string class names are allowed."""
    labels = ds.label_columns if ds.task == "regression" else ()
    features = (f for f in ds.features if f not in ds.categorical)  # categories: any text
    return (*features, *labels, *((ds.weight,) if ds.weight else ()))


def _value(dtypes: dict[str, str], column: str, numeric: bool) -> tuple[Column, str, list[tuple[Column, Column]]]:
    """(the column as the job reads it, its type then, the (bad, reason) checks of its raw text): a string column
    the request declares numeric is parsed as a double, and a token that does not parse is a bad row."""
    from pyspark.sql import functions as F

    col, dtype = F.col(column), dtypes[column]
    if not numeric or dtype != "string":
        return col, dtype, []
    parsed = col.try_cast("double")
    reason = F.concat(F.lit("not a number: '"), F.substring(col, 1, _SHOWN), F.lit(f"' ({column})"))
    return parsed, "double", [(col.isNotNull() & parsed.isNull(), reason)]


def read_as_numbers(df: DataFrame, ds: ResolvedDataset, columns: Sequence[str]) -> tuple[list[Column], bool]:
    """``columns`` of ``df`` as a job reads them, for a pass that counts bad rows itself (evaluation): a string
    column the request declares numeric parsed as a double, null where a token is not a number; and whether any
    column was parsed."""
    numeric, dtypes = set(numeric_columns(ds)), dict(df.dtypes)
    read = [(column, *_value(dtypes, column, column in numeric)) for column in columns]
    return [value.alias(column) for column, value, _dtype, _checks in read], any(checks for *_, checks in read)


def _category_checks(column: str, value: Column, kind: str, dtype: str) -> list[tuple[Column, Column]]:
    """A categorical value its column's type cannot hold (``A1`` in a whole-number column, which a file's first
    rows made one): a bad row, not a row one-hot encoded as nulls (:func:`workers.data.one_hot.text_of`). Values
    Spark would read lossily are bad rows too, as the online encoding refuses them
    (:func:`workers.data.categories.level_of`): a fraction for whole numbers (Spark truncates 2.5 to 2), a number
    other than 0 and 1 for a boolean (Spark reads 2 as true), a boolean for whole numbers (Spark reads it as 1)."""
    from pyspark.sql import functions as F

    from workers.data.categories import WHOLE, Categories

    cast = Categories(inputs=(column,), levels={}, types={column: kind}).kind(column)
    if cast == "string":
        return []
    words = "a boolean" if cast == "boolean" else "a whole number"
    reason = F.concat(F.lit(f"not {words}: '"), F.substring(value.cast("string"), 1, _SHOWN), F.lit(f"' ({column})"))
    bad = value.isNotNull() & value.try_cast(cast).isNull()
    fractional = dtype in _FLOATS or dtype.startswith("decimal")
    if (fractional or dtype in WHOLE) and cast == "boolean":
        bad = bad | ~value.isin(0, 1)
    elif fractional and cast != "boolean":
        bad = bad | (value != F.floor(value))
    elif dtype == "boolean" and cast != "boolean":
        bad = bad | value.isNotNull()
    return [(bad, reason)]


def _value_checks(column: str, value: Column, dtype: str, array_length: int | None) -> list[tuple[Column, Column]]:
    from pyspark.sql import functions as F

    checks = [(value.isNull(), F.lit(f"{column} is null"))]
    if dtype.startswith("array"):
        bad_element = F.exists(value, lambda v: v.isNull() | F.isnan(v) | (F.abs(v) == float("inf")))
        checks.append((bad_element, F.lit(f"{column} has a null, NaN or infinite element")))
        if array_length is not None:
            wrong = F.concat(
                F.lit(f"{column} has "), F.size(value).cast("string"), F.lit(f" values, not {array_length}")
            )
            checks.append((F.size(value) != array_length, wrong))
    elif dtype in _FLOATS:
        checks.append((F.isnan(value) | (F.abs(value) == float("inf")), F.lit(f"{column} is NaN or infinite")))
    return checks


def _checks(
    df: DataFrame, ds: ResolvedDataset, array_length: int | None
) -> tuple[dict[str, Column], list[tuple[Column, Column]], str]:
    """(each kept column's value as the job reads it, the (bad, reason) checks in order, the reasons in words)."""
    from pyspark.sql import functions as F

    numeric = set(numeric_columns(ds))
    values: dict[str, Column] = {}
    read_as: dict[str, str] = {}  # each column's type as the job reads it
    checks: list[tuple[Column, Column]] = []
    corrupt = CORRUPT in df.columns
    if corrupt:
        line = F.concat(F.lit("malformed line: '"), F.substring(F.col(CORRUPT), 1, _SHOWN), F.lit("'"))
        checks.append((F.col(CORRUPT).isNotNull(), line))
    parsed = False
    dtypes = dict(df.dtypes)  # once: each call asks the JVM for the schema
    for column in dict.fromkeys([*ds.features, *ds.label_columns, *([ds.weight] if ds.weight else [])]):
        value, dtype, parse_checks = _value(dtypes, column, column in numeric)
        parsed |= bool(parse_checks)
        if column in ds.categorical:
            parse_checks = _category_checks(column, value, ds.column_types.get(column, "string"), dtype)
        values[column] = value
        read_as[column] = dtype
        checks += parse_checks + _value_checks(column, value, dtype, array_length)
    if ds.weight:
        checks.append((values[ds.weight] < 0, F.lit(f"{ds.weight} is negative")))
    # class indices 0..k-1; text classes are indexed by the job (a Spark ML job given num_classes failed casting
    # 'pricey' to a number here)
    if ds.label and ds.task == "classification" and ds.num_classes is not None and read_as[ds.label] != "string":
        label = values[ds.label]
        outside = (label < 0) | (label >= ds.num_classes) | (label != F.floor(label))
        checks.append((outside, F.lit(f"{ds.label} is not a class in 0..{ds.num_classes - 1}")))
    return values, checks, reason_words(ds, array_length, corrupt=corrupt, parsed=parsed)


def reason_words(ds: ResolvedDataset, array_length: int | None, *, corrupt: bool = False, parsed: bool = False) -> str:
    """What makes a row of this dataset bad, in words (a failure says it)."""
    words = ["a null, NaN or infinite value"]
    if corrupt:
        words.insert(0, "a line that does not parse (too few or too many fields)")
    if parsed:
        words.insert(0, "a value that is not a number")
    if array_length:
        words.append(f"an array whose length is not {array_length}")
    if ds.weight:
        words.append("a negative weight")
    if any(ds.column_types.get(c, "string") != "string" for c in ds.categorical):
        words.append("a category its column's type cannot hold")
    if ds.label and ds.task == "classification" and ds.num_classes is not None:
        words.append(f"a label outside 0..{ds.num_classes - 1}")
    return " or ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


def clean(
    ctx: JobContext,
    df: DataFrame,
    ds: ResolvedDataset,
    *,
    array_length: int | None = None,
    extra_columns: tuple[str, ...] = (),
) -> tuple[DataFrame, int, int]:
    """Keep the dataset's features, label and ``extra_columns``; parse the columns declared numeric; apply the
    bad-row policy. A class label outside ``0..num_classes-1`` is bad too. Returns (clean frame, usable rows,
    dropped rows)."""
    frame, usable, _held, dropped = _clean(ctx, df, ds, array_length, extra_columns, None)
    return frame, usable, dropped


def clean_holdout(
    ctx: JobContext,
    df: DataFrame,
    ds: ResolvedDataset,
    fraction: float,
    split_column: str,
    *,
    array_length: int | None = None,
    extra_columns: tuple[str, ...] = (),
    split: Column | None = None,
) -> tuple[DataFrame, int, int, int]:
    """:func:`clean`, and hold out a seeded ``fraction`` of the rows for validation: ``split_column`` is 1 on a
    held-out row, 0 on a training row (``split``: the expression that says so, by default a seeded ``rand``). The
    split is marked before the bad rows go (so the same rows are held out whichever rows are bad) and counted in
    the same pass. Returns (frame, training rows, validation rows, dropped rows)."""
    from pyspark.sql import functions as F

    marked = df.withColumn(split_column, split if split is not None else (F.rand(ds.split_seed) < fraction).cast("int"))
    frame, usable, held, dropped = _clean(ctx, marked, ds, array_length, (*extra_columns, split_column), split_column)
    return frame, usable - held, held, dropped


def _clean(
    ctx: JobContext,
    df: DataFrame,
    ds: ResolvedDataset,
    array_length: int | None,
    extra_columns: tuple[str, ...],
    split_column: str | None,
) -> tuple[DataFrame, int, int, int]:
    """(clean frame, usable rows, usable rows whose ``split_column`` is 1, dropped rows), in one pass."""
    from pyspark.sql import functions as F

    values, checks, reasons = _checks(df, ds, array_length)
    reason = F.coalesce(*[F.when(bad, why) for bad, why in checks])
    kept = [value.alias(column) for column, value in values.items()]
    flagged = df.select(*kept, *[c for c in extra_columns if c not in values], reason.alias(REASON))
    aggregates = [F.count(F.lit(1)).alias("n"), F.count(REASON).alias("bad")]
    if split_column is not None:
        aggregates.append(F.count(F.when(F.col(REASON).isNull() & (F.col(split_column) == 1), 1)).alias("held"))
    counts = flagged.agg(*aggregates).first()
    assert counts is not None
    total, bad_count = int(counts["n"]), int(counts["bad"] or 0)
    held = int(counts["held"]) if split_column is not None else 0
    if bad_count == 0:
        return flagged.drop(REASON), total, held, 0
    columns = ", ".join(values)
    if bad_count == total or ds.bad_rows == "fail":
        shown = flagged.where(F.col(REASON).isNotNull()).drop(*[split_column] if split_column else [])
        examples = [_example(r.asDict()) for r in shown.limit(EXAMPLES).collect()]
        shown_rows = json.dumps(examples, ensure_ascii=False, default=str)  # JSON, for a script to parse
        if bad_count == total:
            raise JobFailure(
                "BAD_ROWS",
                f"every row of {ds.path} ({total}) is bad: {reasons} in {columns}; first ones: {shown_rows}. "
                + _every_row_hint(examples, ds),
            )
        raise JobFailure(
            "BAD_ROWS",
            f"{n_rows(bad_count)} of {ds.path} {have(bad_count)} {reasons} in {columns}; first ones: {shown_rows}. "
            'Fix the data or set dataset.bad_rows to "skip" to drop them.',
        )
    ctx.warn(f"dropped {n_rows(bad_count)} of {ds.path} with {reasons} (bad_rows=skip)")
    return flagged.where(F.col(REASON).isNull()).drop(REASON), total - bad_count, held, bad_count


_NOT_A_NUMBER = re.compile(r"not a number: '(.*)' \((.+)\)", re.DOTALL)


def bad_examples(df: DataFrame, ds: ResolvedDataset) -> str:
    """The first rows of ``df`` that a training job's checks of ``ds`` find bad, as JSON for a failure's message
    (an evaluation counts its bad rows in its own pass; this extra Spark job runs only when it fails). Empty when
    none of them is (a label the model does not know is found by the evaluation only)."""
    from pyspark.sql import functions as F

    values, checks, _ = _checks(df, ds, None)
    reason = F.coalesce(*[F.when(bad, why) for bad, why in checks])
    kept = [value.alias(column) for column, value in values.items()]
    rows = df.select(*kept, reason.alias(REASON)).where(F.col(REASON).isNotNull()).limit(EXAMPLES).collect()
    return json.dumps([_example(r.asDict()) for r in rows], ensure_ascii=False, default=str) if rows else ""


def _every_row_hint(examples: list[dict[str, Any]], ds: ResolvedDataset) -> str:
    """What to check when no row is usable: one column that is never a number is text (said for what it is to the
    request: a label, the weight, a feature), else the reader options."""
    parsed = [_NOT_A_NUMBER.fullmatch(str(e["reason"])) for e in examples]
    columns = {m.group(2) for m in parsed if m is not None}
    if len(columns) == 1 and all(m is not None and any(c.isalpha() for c in m.group(1)) for m in parsed):
        # words, not numbers written another way (a decimal comma: the options' business)
        column = columns.pop()
        if column in ds.label_columns:
            return (f"{column!r} holds text, not numbers: a regression's label is a number (when training on "
                    "classes, set dataset.task to classification).")  # fmt: skip
        if column == ds.weight:
            return f"{column!r} holds text, not numbers: a weight is a number of 0 or more."
        category = (
            "when training, name it in dataset.categorical (one 0/1 column per value); " if ds.sequence is None else ""
        )
        return (f"{column!r} holds text, not numbers: {category}leave it out of the features, or turn its values "
                "into numbers first.")  # fmt: skip
    return ("Check the separator (options.sep) and the header option (options.header): a file read with the wrong "
            "ones has no usable row.")  # fmt: skip


def _example(row: dict[str, Any]) -> dict[str, Any]:
    """A bad row as the failure shows it: its reason first, long arrays as their length and first values."""
    out = {"reason": row.pop(REASON)}
    for k, v in row.items():
        out[k] = f"[{len(v)} values: {v[:3]}...]" if isinstance(v, list) and len(v) > 6 else v
    return out
