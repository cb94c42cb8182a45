"""The rows of a CSV file as ``predict --csv`` sends them inline: cells read as Spark's CSV inference reads them,
and only the columns the model takes."""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from sparktrain._body import NotJson, strict_loads

_END = "\x00the end of the file\x00"
_BREAK = re.compile(r"\r\n|\r|\n")  # a line break, as a file read with newline="" has them
_LAST_BREAK = re.compile(r"(?:\r\n|\r|\n)\Z")
_ROW = re.compile(r"dataframe_split\.data\[(\d+)\]")  # how the service names a row of an inline request
ARRAY_HOW = 'a JSON array in the cell, quoted: "[0, 1.5, 3]"'
"""How a cell of an array column is written (a CSV cell holds no list otherwise)."""


class CellError(ValueError):
    """A cell that cannot be what its column takes: ``row`` is its row (0: the first after the header)."""

    def __init__(self, row: int, message: str) -> None:
        self.row = row
        super().__init__(message)


def cell(text: str) -> Any:
    """Empty is null, True/true a boolean, then an int, a finite float, or the text itself (``NaN``, ``inf``: JSON has
    no such numbers, and the service names the column that got the text)."""
    if not text:
        return None
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            number = kind(text)
        except ValueError:
            continue
        return number if math.isfinite(number) else text
    return text


def is_stdin(source: str | Path) -> bool:
    """The text ``-`` as given is stdin; a Path never is (``Path("./-")`` prints as ``-``: a file named ``-``)."""
    return isinstance(source, str) and source == "-"


def source_name(source: str | Path) -> str:
    """How messages name a file of rows: ``-`` is stdin, a file as it was given (``./-``)."""
    return "stdin" if is_stdin(source) else str(source)


@contextlib.contextmanager
def _opened(source: str | Path) -> Iterator[IO[str]]:
    """The file, or stdin for ``-``, as the csv module reads one: newline="", and Excel's "CSV UTF-8" BOM dropped."""
    if not is_stdin(source):
        with Path(source).open(newline="", encoding="utf-8-sig") as handle:
            yield handle
        return
    stdin = getattr(sys.stdin, "buffer", None)
    if stdin is None:  # started with stdin closed (<&-): Python has no sys.stdin
        raise ValueError("--csv -: stdin is closed; give the rows on stdin, or a file with --csv FILE")
    handle = io.TextIOWrapper(stdin, newline="", encoding="utf-8-sig")
    try:
        yield handle
    finally:
        handle.detach()  # stdin stays open


def read_rows(path: str | Path) -> tuple[list[str], list[list[str]]]:
    """The header and the rows as text (:func:`read_records` without the line numbers)."""
    columns, rows, _lines = read_records(path)
    return columns, rows


def read_records(path: str | Path) -> tuple[list[str], list[list[str]], list[int]]:
    """The header, the rows as text (blank lines skipped; :func:`typed_rows` reads the values) and the line each row
    starts on (the text ``-``: stdin, :func:`is_stdin`). ValueError when the file cannot be read, has no header or
    has a quoted field that is never closed (it would take in the rest of the file as one cell, and the rows counted
    and sent would not be the file's)."""
    name = source_name(path)
    start = last = 1  # the line the record being read starts on; the last record's
    try:
        with _opened(path) as handle:
            # A line after the file's own: a record of its own, unless a quote left open takes it in.
            reader = csv.reader(itertools.chain(handle, [_END]))
            records: list[list[str]] = []
            lines: list[int] = []
            for record in reader:
                last, start = start, reader.line_num + 1
                if record:
                    records.append(record)
                    lines.append(last)
    except OSError as exc:
        raise ValueError(f"{name}: {exc.strerror or exc}") from exc
    except csv.Error as exc:
        # Past csv.field_size_limit(), most often a quote left open near the top of a long file.
        hint = '; is a quote opened there and never closed (a " missing)?' if "field limit" in str(exc) else ""
        raise ValueError(f"{name}: line {start}: {exc}{hint}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name}: not a CSV file with a header ({exc})") from exc
    if last != reader.line_num:
        opened = _quote_line(records[-1][-1].removesuffix(_END), reader.line_num - 1)
        raise ValueError(f'{name}: line {opened}: a quoted field opens there and is never closed (a " is missing)')
    records.pop()
    if not records:
        raise ValueError(f"{name}: empty; a CSV file with a header line is needed")
    return records[0], records[1:], lines[1:-1]


def at_lines(problem: dict[str, Any], name: str, lines: list[int]) -> dict[str, Any]:
    """A problem of the service about the rows it was sent, with each row it names (``dataframe_split.data[1]``) as
    the line of the file it came from (``rows.csv line 3``)."""

    def line(match: re.Match[str]) -> str:
        i = int(match[1])
        return f"{name} line {lines[i]}" if i < len(lines) else match[0]

    def named(value: Any) -> Any:
        return _ROW.sub(line, value) if isinstance(value, str) else value

    errors = [{k: named(v) for k, v in item.items()} if isinstance(item, dict) else item
              for item in problem.get("errors") or []]  # fmt: skip
    return {**{k: named(v) for k, v in problem.items()}, **({"errors": errors} if "errors" in problem else {})}


def typed_rows(columns: list[str], rows: list[list[str]], types: dict[str, str]) -> list[list[Any]]:
    """Each cell as the model's signature types its column (``types``: name -> type): a text column's cells stay
    text (its ``007`` is not the number 7, nor its ``true`` a boolean; empty is null), an array column's are JSON
    arrays (:data:`ARRAY_HOW`; empty is null; else a :class:`CellError`), the others are read by :func:`cell`."""
    kinds = [types.get(name) for name in columns]
    typed = []
    for r, row in enumerate(rows):
        values: list[Any] = []
        for i, value in enumerate(row):
            kind = kinds[i] if i < len(kinds) else None
            if kind == "string":
                values.append(value or None)
            elif kind == "array":
                values.append(_array(value, r, columns[i]))
            else:
                values.append(cell(value))
        typed.append(values)
    return typed


def _array(text: str, row: int, column: str) -> list[Any] | None:
    if not text.strip():
        return None
    try:
        value = strict_loads(text)
    except NotJson as exc:
        why = f"{text[:20]!r}{'...' if len(text) > 20 else ''} is not JSON: {exc}"
    else:
        if isinstance(value, list):
            return value
        why = f"{text[:20]!r} is not an array"
    raise CellError(row, f"column {column!r} takes an array, written as {ARRAY_HOW}; {why}")


def _quote_line(field: str, lines: int) -> int:
    """The line where a quoted field that is never closed opens. It runs to the end of the file (line ``lines``),
    so it holds a line break for each line after its own, and the last line's when that line has one."""
    return lines - len(_BREAK.findall(_LAST_BREAK.sub("", field, count=1)))


def shown_name(name: str, index: int) -> str:
    """A column as a message names it: by its name, or an unnamed one (an empty header cell) by its place; the first
    is most often pandas' index, which ``DataFrame.to_csv(path)`` writes unless given ``index=False``."""
    if name.strip():
        return name
    if index == 0:
        return "the unnamed first column (pandas' index? to_csv(..., index=False) leaves it out)"
    return f"the unnamed column {index + 1}"


def model_columns(
    columns: list[str], rows: list[list[Any]], inputs: list[str]
) -> tuple[list[str], list[list[Any]], list[str]]:
    """The columns among ``inputs`` (the model signature's names), in the file's order, with the names left out
    (:func:`shown_name`: an unnamed one by its place).

    A file holds ids and labels beside the features more often than not, and the service refuses a column the model
    does not take; a feature the file lacks stays lacking, for the service's 422 to name. A row shorter or longer
    than the header is sent as it is (the service names it). No inputs (a signature without names) keeps it all."""
    if not inputs:
        return columns, rows, []
    wanted = set(inputs)
    keep = [i for i, name in enumerate(columns) if name in wanted]
    dropped = [shown_name(name, i) for i, name in enumerate(columns) if name not in wanted]
    if not dropped:
        return columns, rows, []
    kept_rows = [[row[i] for i in keep] if len(row) == len(columns) else row for row in rows]
    return [columns[i] for i in keep], kept_rows, dropped
