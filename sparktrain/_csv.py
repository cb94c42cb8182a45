"""The rows of a CSV file as ``predict --csv`` sends them inline: cells read as Spark's CSV inference reads them,
and only the columns the model takes."""

from __future__ import annotations

import csv
import itertools
import re
from pathlib import Path
from typing import Any

_END = "\x00the end of the file\x00"
_BREAK = re.compile(r"\r\n|\r|\n")  # a line break, as a file read with newline="" has them
_LAST_BREAK = re.compile(r"(?:\r\n|\r|\n)\Z")


def cell(text: str) -> Any:
    """Empty is null, True/true a boolean, then an int, a float, or the text itself."""
    if not text:
        return None
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    """The header and the rows as text (blank lines skipped; :func:`typed_rows` reads the values); ValueError when
    the file cannot be read, has no header or has a quoted field that is never closed (it would take in the rest of
    the file as one cell, and the rows counted and sent would not be the file's)."""
    start = last = 1  # the line the record being read starts on; the last record's
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:  # Excel's "CSV UTF-8" starts with a BOM
            # A line after the file's own: a record of its own, unless a quote left open takes it in.
            reader = csv.reader(itertools.chain(handle, [_END]))
            records: list[list[str]] = []
            for record in reader:
                last, start = start, reader.line_num + 1
                if record:
                    records.append(record)
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from exc
    except csv.Error as exc:
        # Past csv.field_size_limit(), most often a quote left open near the top of a long file.
        hint = '; is a quote opened there and never closed (a " missing)?' if "field limit" in str(exc) else ""
        raise ValueError(f"{path}: line {start}: {exc}{hint}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a CSV file with a header ({exc})") from exc
    if last != reader.line_num:
        opened = _quote_line(records[-1][-1].removesuffix(_END), reader.line_num - 1)
        raise ValueError(f'{path}: line {opened}: a quoted field opens there and is never closed (a " is missing)')
    records.pop()
    if not records:
        raise ValueError(f"{path}: empty; a CSV file with a header line is needed")
    return records[0], records[1:]


def typed_rows(columns: list[str], rows: list[list[str]], types: dict[str, str]) -> list[list[Any]]:
    """Each cell as the model's signature types its column (``types``: name -> type): a text column's cells stay
    text (its ``007`` is not the number 7, nor its ``true`` a boolean; empty is null), the others are read by
    :func:`cell`."""
    text = [types.get(name) == "string" for name in columns]
    return [[(value or None) if i < len(text) and text[i] else cell(value) for i, value in enumerate(row)]
            for row in rows]  # fmt: skip


def _quote_line(field: str, lines: int) -> int:
    """The line where a quoted field that is never closed opens. It runs to the end of the file (line ``lines``),
    so it holds a line break for each line after its own, and the last line's when that line has one."""
    return lines - len(_BREAK.findall(_LAST_BREAK.sub("", field, count=1)))


def model_columns(
    columns: list[str], rows: list[list[Any]], inputs: list[str]
) -> tuple[list[str], list[list[Any]], list[str]]:
    """The columns among ``inputs`` (the model signature's names), in the file's order, with the names left out.

    A file holds ids and labels beside the features more often than not, and the service refuses a column the model
    does not take; a feature the file lacks stays lacking, for the service's 422 to name. A row shorter or longer
    than the header is sent as it is (the service names it). No inputs (a signature without names) keeps it all."""
    if not inputs:
        return columns, rows, []
    wanted = set(inputs)
    keep = [i for i, name in enumerate(columns) if name in wanted]
    dropped = [name for name in columns if name not in wanted]
    if not dropped:
        return columns, rows, []
    kept_rows = [[row[i] for i in keep] if len(row) == len(columns) else row for row in rows]
    return [columns[i] for i in keep], kept_rows, dropped
