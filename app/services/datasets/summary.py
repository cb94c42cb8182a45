"""What registering local CSV / JSON-lines data reports (``POST /datasets``: the columns with their types and how
many values do not parse as numbers, the rows, the first rows, the malformed lines), read on the driver in one
streamed pass without a Spark job, as Spark's own registration pass would report it
(app/services/datasets/registry.py): Spark's schema inference over every line (malformed lines' tokens included,
by position; empty tokens and repeated header lines skipped), ``PERMISSIVE`` lines with a corrupt-record column
(too few or too many fields; an unclosed quote ends at the line's end; a repeated header line where a column is
numeric), and per string column the values of the parsed lines that Spark's cast does not read as a double. What
this does not follow as Spark does (options it does not know, dates, decimals, nested records, a quoted line
break, more than :data:`SUMMARY_BYTES`) it leaves to Spark (None)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.services.datasets.quotes import files_read_alike
from app.services.datasets.sample import (
    csv_options,
    escape_char,
    header_names,
    json_type,
    merge_types,
    text_encoding,
    text_schema,
)

if TYPE_CHECKING:
    import pyarrow as pa

_INT32 = 2**31

SUMMARY_BYTES = 64 << 20
"""Local CSV / JSON-lines data up to this size is summarized on the driver when it is registered (one streamed
pass); larger data is read by Spark after the answer (app/services/datasets/registry.py)."""
NUMBER = r"^\s*[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?[dDfF]?|(?i:inf|infinity|nan))\s*$"
"""A token Spark's cast reads as a double: blanks around it, an exponent, a ``d``/``f`` suffix, infinity, NaN."""
_INTEGER = r"^[+-]?\d+$"
_BOOLEAN = r"^(?i:true|false)$"
_DATE_LIKE = r"^\s*\d{4}-\d\d?-\d\d?"
"""Dates and timestamps: Spark's inference types them by its own rules, so Spark reads such data."""
_SUMMARY_OPTIONS = {"csv": {"sep", "delimiter", "header", "quote", "escape", "nullvalue", "inferschema", "encoding",
                            "charset"}, "json": set()}  # fmt: skip
"""Reader options a driver-side summary reads as Spark would; with any other, Spark reads the data."""

Summary = tuple[list[dict[str, Any]], int, list[dict[str, Any]], int, list[str]]
"""(columns as ``{name, type, nullable, not_numbers}``, rows that parse, the first rows, lines that do not parse,
the first of those lines)."""


def text_summary(files: list[Path], fmt: str, options: dict[str, str], *, sample_rows: int) -> Summary | None:
    """What registering local CSV / JSON-lines data reports, as Spark's registration pass would (its full schema
    inference, ``PERMISSIVE`` lines with a corrupt-record column, values of string columns that do not parse as
    numbers), read in one streamed pass on the driver; None when Spark must read it (options not known here, more
    than :data:`SUMMARY_BYTES`, dates, decimals, nested records, a quoted line break)."""
    lowered = {k.lower(): v for k, v in options.items()}
    if fmt not in _SUMMARY_OPTIONS or not files or not set(lowered) <= _SUMMARY_OPTIONS[fmt]:
        return None
    try:
        if files_bytes(files) > SUMMARY_BYTES:
            return None
        return _json_summary(files, sample_rows) if fmt == "json" else _csv_summary(files, lowered, sample_rows)
    except (OSError, UnicodeError, LookupError):
        return None


def files_bytes(files: list[Path]) -> float:
    """The files' bytes; infinite when one went away meanwhile (Spark then reads what is there)."""
    try:
        return sum(f.stat().st_size for f in files)
    except OSError:
        return math.inf


class _ColumnStats:
    """Per column: the values of the rows that parse that are not numbers (``unparsed``); and, for the type, over
    every line's tokens (Spark's inference reads malformed lines too, by position): values present, how many are not
    numbers, not whole numbers, not booleans, or look like dates, and the whole numbers' range."""

    def __init__(self, width: int) -> None:
        self.unparsed = [0] * width
        self.present = [0] * width
        self.not_number = [0] * width
        self.not_integer = [0] * width
        self.not_boolean = [0] * width
        self.dates = [0] * width
        self.low: list[int | None] = [None] * width
        self.high: list[int | None] = [None] * width

    def add(self, i: int, values: pa.Array, *, counted: bool = True) -> None:
        """Column ``i``'s values of some rows; ``counted``: rows that parse (else a malformed line's tokens)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        def missing(pattern: str) -> int:
            return len(values) - int(pc.sum(pc.match_substring_regex(values, pattern)).as_py() or 0)

        values = pc.drop_null(values)
        if counted:
            self.unparsed[i] += missing(NUMBER)
        values = pc.filter(values, pc.not_equal(values, ""))  # Spark's inference skips empty tokens
        self.present[i] += len(values)
        self.not_number[i] += missing(NUMBER)
        self.not_integer[i] += missing(_INTEGER)
        self.not_boolean[i] += missing(_BOOLEAN)
        self.dates[i] += len(values) - missing(_DATE_LIKE)
        whole = pc.filter(values, pc.match_substring_regex(values, _INTEGER))
        if len(whole):
            numbers = pc.cast(pc.replace_substring_regex(whole, r"^\+", ""), pa.int64())  # beyond 64 bits: raises
            bounds = pc.min_max(numbers).as_py()
            low, high = self.low[i], self.high[i]
            self.low[i] = bounds["min"] if low is None else min(low, bounds["min"])
            self.high[i] = bounds["max"] if high is None else max(high, bounds["max"])

    def spark_type(self, i: int, infer: bool) -> str | None:
        """The type Spark's inference gives the column (None: one it decides by rules not followed here)."""
        if not infer or not self.present[i]:
            return "string"
        if self.dates[i] == self.present[i]:
            return None
        if not self.not_integer[i]:
            low, high = self.low[i] or 0, self.high[i] or 0
            return "int" if low >= -_INT32 and high < _INT32 else "bigint"
        if not self.not_number[i]:
            return "double"
        return "boolean" if not self.not_boolean[i] else "string"


def _typed(value: str | None, spark_type: str) -> Any:
    """A CSV token as Spark's row holds it in a column of this type."""
    if value is None or spark_type == "string":
        return value
    if spark_type in ("int", "bigint"):
        return int(value)
    if spark_type == "boolean":
        return value.lower() == "true"
    return float(value.strip().rstrip("dDfF"))


def _csv_summary(files: list[Path], options: dict[str, str], sample_rows: int) -> Summary | None:
    import csv

    import pyarrow as pa
    import pyarrow.csv as pcsv

    inferred = text_schema(files, "csv", options, open_quotes=True)  # (a quote left open: parsed below)
    parsed = csv_options(options)
    if inferred is None or parsed is None:
        return None
    if not files_read_alike(files, options, text_encoding(options), open_quotes=True):
        return None  # (quotes or escapes Spark reads otherwise: Spark summarizes the data)
    names, (parse, convert, _read, header) = list(inferred[0]), parsed
    texts = [text for _name, text in header_names(files[0], options) or []] if header else names  # as written
    if len(texts) != len(names):
        return None
    keys = [f"c{i}" for i in range(len(names))]
    encoding = options.get("encoding", options.get("charset", "utf8"))
    try:
        whole_lines = pcsv.ReadOptions(encoding=encoding, autogenerate_column_names=True)
        opened = pcsv.open_csv(files[0], read_options=whole_lines, parse_options=parse)
    except (pa.ArrowException, ValueError):
        return None
    if len(opened.schema) != len(names):
        return None
    malformed: list[str] = []

    def invalid(row: Any) -> str:
        if row.text.strip():  # Spark skips blank lines
            malformed.append(row.text)
        return "skip"

    parse.invalid_row_handler = invalid
    convert.column_types = dict.fromkeys(keys, pa.string())
    stats, repeats, rows = _ColumnStats(len(keys)), 0, 0
    first: list[dict[str, Any]] = []  # the first rows but repeated header lines
    every: list[dict[str, Any]] = []  # the first rows

    def add(batch: pa.RecordBatch) -> bool:
        """Count a batch of rows that parse; False when a value holds a line break (Spark reads line by line)."""
        nonlocal repeats, rows
        import pyarrow.compute as pc

        columns = [batch.column(i) for i in range(len(keys))]
        if any(pc.any(pc.match_substring(c, "\n")).as_py() for c in columns):
            return False
        every.extend(batch.slice(0, max(0, sample_rows - len(every))).to_pylist())
        if header and batch.num_rows:  # a header line repeated in the middle: Spark's inference skips it
            empty = ("", options.get("nullvalue", ""))  # a header's empty name: that line's field is null too
            same = [pc.fill_null(pc.equal(c, text), text in empty) for c, text in zip(columns, texts, strict=True)]
            repeated = same[0]
            for other in same[1:]:
                repeated = pc.and_(repeated, other)
            repeats += int(pc.sum(repeated).as_py() or 0)
            batch = batch.filter(pc.invert(repeated))
            columns = [batch.column(i) for i in range(len(keys))]
        rows += batch.num_rows
        first.extend(batch.slice(0, max(0, sample_rows - len(first))).to_pylist())
        for i, column in enumerate(columns):
            stats.add(i, column)
        return True

    try:
        for file in files:
            read = pcsv.ReadOptions(column_names=keys, skip_rows=1 if header else 0, encoding=encoding)
            for batch in pcsv.open_csv(file, read_options=read, parse_options=parse, convert_options=convert):
                if not add(batch):
                    return None
        bad: list[str] = []
        split: list[list[str | None]] = []
        tokens: list[list[str | None]] = []
        quote, escape = options.get("quote", '"'), escape_char(options)  # none: doubled quotes
        null = options.get("nullvalue", "")
        for text in malformed:  # pyarrow may read an unclosed quote across lines: Spark parses each line alone
            lines = [line for line in text.splitlines() if line.strip()]
            for line in lines:
                fields = next(csv.reader([line], delimiter=parse.delimiter, quotechar=quote or None,
                                         quoting=csv.QUOTE_MINIMAL if quote else csv.QUOTE_NONE,
                                         escapechar=escape or None, doublequote=True, strict=False), [])  # fmt: skip
                values = [None if f == null else f for f in fields[: len(keys)]]
                if len(lines) > 1 and len(fields) == len(keys):
                    split.append(values)
                else:
                    bad.append(line)
                    tokens.append(values + [None] * (len(keys) - len(values)))
        if split and not add(pa.RecordBatch.from_pylist([dict(zip(keys, r, strict=True)) for r in split])):
            return None
        for i in range(len(keys)) if tokens else ():
            stats.add(i, pa.array([t[i] for t in tokens], pa.string()), counted=False)
    except (pa.ArrowException, ValueError, csv.Error):
        return None
    infer = options.get("inferschema", "false").lower() == "true"
    types = [stats.spark_type(i, infer) for i in range(len(keys))]
    if any(t is None for t in types):
        return None
    not_numbers = [stats.unparsed[i] if t == "string" else 0 for i, t in enumerate(types)]
    if repeats and set(types) != {"string"}:  # the header's words do not parse as the column's numbers
        bad += [parse.delimiter.join(texts)] * repeats
    elif repeats:
        rows, first = rows + repeats, every
        not_numbers = [
            n + (repeats if not re.match(NUMBER, text) else 0) for n, text in zip(not_numbers, texts, strict=True)
        ]
    columns = [{"name": name, "type": t, "nullable": True, "not_numbers": n}
               for name, t, n in zip(names, types, not_numbers, strict=True)]  # fmt: skip
    sample = [
        {name: _typed(row[key], str(t)) for name, key, t in zip(names, keys, types, strict=True)} for row in first
    ]
    return columns, rows, sample, len(bad), bad[:sample_rows]


def _json_summary(files: list[Path], sample_rows: int) -> Summary | None:
    kinds: dict[str, list[str | None]] = {}
    not_numbers: dict[str, int] = {}
    first: list[dict[str, Any]] = []
    bad: list[str] = []
    rows = 0
    number = re.compile(NUMBER)
    for file in files:
        with file.open(encoding="utf-8-sig") as f:  # Spark skips a byte order mark
            for line in f:
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if isinstance(record, list):
                    return None  # an array of records: Spark makes a row of each
                if not isinstance(record, dict):
                    bad.append(line.rstrip("\r\n"))
                    continue
                rows += 1
                if len(first) < sample_rows:
                    first.append(record)
                for key, value in record.items():
                    kind = json_type(value)
                    if kind is not None and "struct" in kind:
                        return None  # Spark names a struct's fields in its type
                    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
                        return None  # a decimal to Spark
                    kinds.setdefault(key, []).append(kind)
                    text = isinstance(value, str) and not number.match(value)
                    not_numbers[key] = not_numbers.get(key, 0) + int(text or isinstance(value, bool | list | dict))
    if not rows and not bad:
        return None
    types = {key: merge_types(found) or "string" for key, found in sorted(kinds.items())}
    columns = [
        {"name": key, "type": t, "nullable": True,
         "not_numbers": not_numbers[key] if t == "string" else 0 if t in ("bigint", "double", "boolean") else None}
        for key, t in types.items()
    ]  # fmt: skip
    sample = [{key: _json_value(record.get(key), t) for key, t in types.items()} for record in first]
    return columns, rows, sample, len(bad), bad[:sample_rows]


def _json_value(value: Any, spark_type: str) -> Any:
    """A JSON value as Spark's row holds it in a column of this type (a string column keeps a number's text)."""
    if value is None:
        return None
    if spark_type == "string" and not isinstance(value, str):
        return json.dumps(value, separators=(",", ":")) if not isinstance(value, bool) else str(value).lower()
    if spark_type == "double":
        return float(value)
    if spark_type == "array<double>":
        return [None if v is None else float(v) for v in value]
    return value


def quoted_line_break(files: list[Path], options: dict[str, str]) -> bool:
    """Whether local CSV data has a quoted value that holds a line break, which Spark reads as two malformed lines
    unless ``multiLine`` is true (the driver's summary leaves such data to Spark)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    parsed = csv_options({k.lower(): v for k, v in options.items()})
    if parsed is None:
        return False
    parse, _convert, _read, _header = parsed
    parse.newlines_in_values = True
    try:
        for file in files:
            read = pcsv.ReadOptions(autogenerate_column_names=True)
            for batch in pcsv.open_csv(file, read_options=read, parse_options=parse):
                texts = [c for c in batch.columns if pa.types.is_string(c.type)]
                if any(pc.any(pc.match_substring_regex(c, r"[\r\n]")).as_py() for c in texts):
                    return True
    except (pa.ArrowException, ValueError, OSError):
        return False
    return False
