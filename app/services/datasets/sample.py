"""Local CSV and JSON-lines data read on the driver without a Spark job: the schema from a bounded sample of the
text, a column's values streamed with pyarrow (app/services/datasets/schema.py says why no Spark job).

The schema is the one Spark's inference would give on the sample (the first :data:`SAMPLE_BYTES` of the files,
whole lines only): CSV with the header and the reader options Spark uses (``sep``, ``header``, ``quote``,
``escape``, ``nullValue``, ``comment``, ``inferSchema``, ``encoding``), integers as ``int`` or ``bigint`` by
their range; JSON lines with Spark's JSON inference (integers are ``bigint``, fields sorted by name, a line that
does not parse adds ``_corrupt_record``). A column whose later rows hold other values may be typed otherwise by the
job's full inference: columns declared numeric are parsed per row there anyway (workers/data/clean.py).
Options this module does not know make the caller let Spark read the data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.services.datasets import quotes

if TYPE_CHECKING:
    import pyarrow as pa

SAMPLE_BYTES = 1 << 20
"""How much text the schema is inferred from."""
_VALUE_ONLY = {
    "mode", "columnnameofcorruptrecord", "dateformat", "timestampformat", "timestampntzformat",
    "ignoreleadingwhitespace", "ignoretrailingwhitespace", "nanvalue", "positiveinf", "negativeinf", "enforceschema",
    "samplingratio",
    "emptyvalue", "locale", "maxcolumns", "maxcharspercolumn", "unescapedquotehandling", "multiline",
    "allownumericleadingzeros", "allowcomments", "allowsinglequotes", "allowunquotedfieldnames", "dropfieldifallnull",
    "primitivesasstring", "prefersdecimal", "charset", "encoding",
}  # fmt: skip
"""Reader options that change values, not which columns there are (or that are handled below)."""
_CSV_OPTIONS = {"sep", "delimiter", "header", "quote", "escape", "nullvalue", "comment", "inferschema"}
_INT32 = 2**31


def known_options(fmt: str, options: dict[str, str]) -> bool:
    allowed = _VALUE_ONLY | (_CSV_OPTIONS if fmt == "csv" else set())
    lowered = {k.lower(): v for k, v in options.items()}
    if fmt == "json" and lowered.get("primitivesasstring", "false").lower() == "true":
        return False
    if fmt == "json" and lowered.get("multiline", "false").lower() == "true":
        return False
    return all(k in allowed for k in lowered)


def _sample(files: list[Path], encoding: str) -> tuple[str, bool]:
    """(the first whole lines of the files, up to :data:`SAMPLE_BYTES`, whether that is all of them)."""
    parts: list[str] = []
    left = SAMPLE_BYTES
    for file in files:
        with file.open("rb") as f:
            data = f.read(left + 1)
        complete = len(data) <= left
        if not complete:
            data = data[: data.rfind(b"\n") + 1]
        text = data.decode(encoding, errors="replace")
        parts.append(text if text.endswith("\n") or not text else text + "\n")
        left -= len(data)
        if not complete or left <= 0:
            return "".join(parts), False
    return "".join(parts), True


def text_schema(
    files: list[Path], fmt: str, options: dict[str, str], *, open_quotes: bool = False
) -> tuple[dict[str, str], bool] | None:
    """(column -> Spark type as Spark would infer it from the sample, whether the sample is all the data); None
    when Spark must read it (options not known here, text pyarrow cannot read). ``open_quotes``: a CSV sample with
    a quote left open at a line's end is read too (pyarrow reads on past the line: its columns' names only are
    Spark's, for a caller that parses such lines itself)."""
    if fmt not in ("csv", "json") or not known_options(fmt, options) or not files:
        return None
    lowered = {k.lower(): v for k, v in options.items()}
    try:
        text, complete = _sample(files[:1] if fmt == "csv" else files, text_encoding(lowered))
    except (OSError, LookupError):
        return None
    if fmt == "csv" and not quotes.reads_alike(text, lowered, open_quotes=open_quotes):  # Spark reads them otherwise
        return None
    schema = _csv_schema(text, lowered) if fmt == "csv" else _json_schema(text)
    return (schema, complete) if schema is not None else None


def escape_char(options: dict[str, str]) -> str:
    """The escape character of CSV options as a reader that also reads doubled quotes takes it: none when it is
    the quote itself (``escape: "\""``, RFC 4180's doubled quotes as pandas and Excel write them; given as the
    escape character, pyarrow and Python's csv read a closing quote followed by the separator as an escape)."""
    quote, escape = options.get("quote", '"'), options.get("escape", "\\")
    return "" if escape == quote else escape


def csv_options(options: dict[str, str]) -> tuple[Any, Any, Any, bool] | None:
    import pyarrow.csv as pcsv

    sep = options.get("sep", options.get("delimiter", ","))
    quote, escape = options.get("quote", '"'), options.get("escape", "\\")
    if len(sep) != 1 or len(quote) > 1 or len(escape) > 1:
        return None
    header = options.get("header", "false").lower() == "true"
    try:
        parse = pcsv.ParseOptions(
            delimiter=sep,
            quote_char=quote or False,
            escape_char=escape_char(options) or False,
            double_quote=True,
            invalid_row_handler=lambda _row: "skip",  # a malformed line is a bad row of the job, not of the schema
        )
    except ValueError:  # a character pyarrow does not take (not ASCII: "þ"): Spark reads such data, not the driver
        return None
    convert = pcsv.ConvertOptions(
        null_values=[options.get("nullvalue", "")],
        strings_can_be_null=True,
        true_values=["true", "True", "TRUE"],
        false_values=["false", "False", "FALSE"],
    )
    read = pcsv.ReadOptions(autogenerate_column_names=not header)
    return parse, convert, read, header


def _csv_schema(text: str, options: dict[str, str]) -> dict[str, str] | None:
    import io

    import pyarrow as pa
    import pyarrow.csv as pcsv

    if options.get("comment"):
        text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith(options["comment"]))
    parsed = csv_options(options)
    if parsed is None or not text.strip():
        return None
    parse, convert, read, _header = parsed
    if _header:  # Spark's inference skips every line equal to the header line, not only the first
        first, _, rest = text.partition("\n")
        text = first + "\n" + "".join(line for line in rest.splitlines(keepends=True) if line.rstrip("\r\n") != first)
    try:
        table = pcsv.read_csv(
            io.BytesIO(text.encode()), read_options=read, parse_options=parse, convert_options=convert
        )
    except (pa.ArrowException, ValueError):
        return None
    infer = options.get("inferschema", "false").lower() == "true"
    names = spark_names(table.column_names, options) if _header else [f"_c{i}" for i in range(table.num_columns)]
    return {name: _spark_type(table.column(i)) if infer else "string" for i, name in enumerate(names)}


def spark_names(header: list[str], options: dict[str, str]) -> list[str]:
    """The column names Spark gives a CSV header's fields: ``_c<position>`` for an empty one (pandas' unnamed
    index, R's ``""``) or one equal to ``nullValue``; a name given twice, whatever its case (``a,a``,
    ``Price,price``), with its position appended (``a0``, ``a1``)."""
    null = options.get("nullvalue", "")
    given = [name for name in header if name and name != null]
    lowered = [name.lower() for name in given]
    twice = {name for name in lowered if lowered.count(name) > 1}
    return [
        f"_c{i}" if not name or name == null else f"{name}{i}" if name.lower() in twice else name
        for i, name in enumerate(header)
    ]


def header_names(file: Path, options: dict[str, str]) -> list[tuple[str, str]] | None:
    """(Spark's name, the header's own text) of each column of a CSV file with a header line; None when its first
    line cannot be read. The line is read as text (pyarrow's reading made ``0`` an empty name and ``2019``
    ``2019.0``)."""
    import csv

    sep = options.get("sep", options.get("delimiter", ","))
    quote, escape = options.get("quote", '"'), options.get("escape", "\\")
    if len(sep) != 1 or len(quote) > 1 or len(escape) > 1:
        return None
    dialect: dict[str, Any] = {"delimiter": sep, "doublequote": True, "strict": False}
    if quote:
        dialect.update(quotechar=quote, escapechar=escape if escape and escape != quote else None)
    else:
        dialect.update(quoting=csv.QUOTE_NONE, escapechar=escape or None)
    try:
        with file.open(encoding=text_encoding(options), newline="") as f:
            raw = next(csv.reader(f, **dialect), None)
    except (OSError, UnicodeDecodeError, LookupError, csv.Error):
        return None
    return list(zip(spark_names(raw, options), raw, strict=True)) if raw else None


def text_encoding(options: dict[str, str]) -> str:
    """The text's encoding for Python's decoding: UTF-8 with its byte order mark skipped, as Spark skips it."""
    encoding = options.get("encoding", options.get("charset", "utf-8"))
    return "utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding


def _spark_type(column: pa.ChunkedArray) -> str:
    import pyarrow as pa
    import pyarrow.compute as pc

    t = column.type
    if pa.types.is_integer(t):
        bounds = pc.min_max(column).as_py()
        small = bounds["min"] is None or (bounds["min"] >= -_INT32 and bounds["max"] < _INT32)
        return "int" if small else "bigint"
    if pa.types.is_floating(t):
        return "double"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_timestamp(t):
        return "timestamp"
    if pa.types.is_date(t):
        return "date"
    return "string"  # strings, and columns with no value in the sample (Spark: string)


_JSON_ORDER = ("boolean", "bigint", "double", "string")


def json_type(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "bigint"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        inner = merge_types([json_type(v) for v in value])
        return f"array<{inner or 'string'}>"
    return "struct"


def merge_types(types: list[str | None]) -> str | None:
    """Spark's widening of JSON types: bigint + double is double, anything else mixed is string."""
    found = {t for t in types if t is not None}
    if not found:
        return None
    if len(found) == 1:
        return found.pop()
    if found == {"bigint", "double"}:
        return "double"
    arrays = {t for t in found if t.startswith("array<")}
    if arrays == found:
        inner = merge_types([t[6:-1] for t in arrays])
        return f"array<{inner}>"
    return "string"


def _json_schema(text: str) -> dict[str, str] | None:
    seen: dict[str, list[str | None]] = {}
    corrupt = False
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            corrupt = True
            continue
        if not isinstance(record, dict):
            corrupt = True
            continue
        for key, value in record.items():
            seen.setdefault(key, []).append(json_type(value))
    if not seen:
        return None
    if corrupt:
        seen.setdefault("_corrupt_record", ["string"])
    return {key: merge_types(types) or "string" for key, types in sorted(seen.items())}


def column_values(files: list[Path], fmt: str, options: dict[str, str], column: str, dtype: str) -> Any:
    """A column of local CSV / JSON-lines data as one pyarrow array (strings for a ``string`` column, else numbers),
    streamed from every file; None when pyarrow cannot read it as that type (Spark then decides)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    found = text_columns(files, fmt, options, [column])
    if found is None:
        return None
    values = found[column]
    if dtype == "string":
        return values
    lowered = {k.lower(): v for k, v in options.items()}
    if fmt == "csv" and lowered.get("header", "false").lower() == "true":  # a repeated header line is no value
        header = dict(header_names(files[0], lowered) or [])
        values = pc.if_else(pc.equal(values, header.get(column, column)), None, values)
    try:
        return pc.cast(values, pa.float64())
    except (pa.ArrowException, ValueError):
        return None


def text_columns(files: list[Path], fmt: str, options: dict[str, str], columns: list[str]) -> dict[str, Any] | None:
    """Columns of local CSV / JSON-lines data as their text (one pyarrow string array each), streamed from every
    file in one pass; None when pyarrow cannot read them (Spark then decides)."""
    import pyarrow as pa

    lowered = {k.lower(): v for k, v in options.items()}
    if not known_options(fmt, options) or (fmt == "csv" and "comment" in lowered):
        return None
    if fmt == "csv" and not quotes.files_read_alike(files, lowered, text_encoding(lowered)):
        return None
    if not columns:
        return {}
    chunks: dict[str, list[pa.Array]] = {column: [] for column in columns}
    header = None  # Spark names the columns by the first file's header, and skips each file's first line
    if fmt == "csv" and lowered.get("header", "false").lower() == "true":
        header = [name for name, _text in header_names(files[0], lowered) or []] if files else []
        if not header:
            return None
    try:
        for file in files:
            for column, read in _read_columns(file, fmt, lowered, columns, header).items():
                chunks[column].extend(read)
    except (pa.ArrowException, ValueError, OSError, KeyError):
        return None
    return {column: pa.chunked_array(read, pa.string()) for column, read in chunks.items()}


def _read_columns(
    file: Path, fmt: str, options: dict[str, str], columns: list[str], header: list[str] | None
) -> dict[str, list[pa.Array]]:
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson

    if fmt == "json":
        try:
            table = pjson.read_json(file, parse_options=pjson.ParseOptions(unexpected_field_behavior="infer"))
        except pa.ArrowInvalid:  # a line that is not JSON: Python reads the lines one by one
            lines = _json_lines(file, columns)
            return {column: [pa.array(lines[column], pa.string())] for column in columns}
        found = {c: table.column(c) if c in table.column_names else pa.nulls(table.num_rows) for c in columns}
        return {c: [pa.array([None if v is None else str(v) for v in values.to_pylist()], pa.string())]
                for c, values in found.items()}  # fmt: skip
    parsed = csv_options(options)
    if parsed is None:
        raise ValueError("options")
    parse, convert, read, _header = parsed
    names: dict[str, str] = {}
    for column in columns:
        if header is None and not column.startswith("_c"):
            raise KeyError(column)
        names[column] = f"f{header.index(column) if header is not None else int(column[2:])}"
    if header is not None:  # by position: the header's own text may be empty or given twice
        read = pcsv.ReadOptions(column_names=[f"f{i}" for i in range(len(header))], skip_rows=1,
                                encoding=options.get("encoding", options.get("charset", "utf8")))  # fmt: skip
    convert.include_columns = list(dict.fromkeys(names.values()))
    convert.column_types = dict.fromkeys(names.values(), pa.string())
    reader = pcsv.open_csv(file, read_options=read, parse_options=parse, convert_options=convert)
    out: dict[str, list[pa.Array]] = {column: [] for column in columns}
    for batch in reader:
        for column, name in names.items():
            out[column].append(batch.column(name))
    return out


def _json_lines(file: Path, columns: list[str]) -> dict[str, list[str | None]]:
    out: dict[str, list[str | None]] = {column: [] for column in columns}
    with file.open(encoding="utf-8-sig", errors="replace") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            for column in columns:
                value = record.get(column) if isinstance(record, dict) else None
                out[column].append(None if value is None else str(value))
    return out


def first_json_value(files: list[Path], column: str) -> tuple[bool, Any]:
    """(found, the first non-null value of a JSON-lines column in the sample); not found when the sample has none
    and is not all the data."""
    text, complete = _sample(files, "utf-8-sig")
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get(column) is not None:
            return True, record[column]
    return complete, None
