"""The rows of a CSV file as ``predict --csv`` sends them inline: cells read as Spark's CSV inference reads them,
and only the columns the model takes."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any


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


def read_rows(path: Path) -> tuple[list[str], list[list[Any]]]:
    """The header and the rows (blank lines skipped); ValueError when the file cannot be read or has no header."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:  # Excel's "CSV UTF-8" starts with a BOM
            reader = csv.reader(handle)
            columns = next(reader)
            return columns, [[cell(text) for text in row] for row in reader if row]
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from exc
    except StopIteration:
        raise ValueError(f"{path}: empty; a CSV file with a header line is needed") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a CSV file with a header ({exc})") from exc


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
