"""What local data is, from its first bytes: a file named as parquet that is not parquet, and a file named as CSV
or JSON lines that is empty, parquet, or not UTF-8. Each answer is a 422 before any Spark job: Spark's own errors
(or its silent reading of binary as text) said none of this."""

from __future__ import annotations

import codecs
import os
import re
from pathlib import Path

from app.services.datasets.paths import Format, compressed


def local_files(path: str) -> tuple[list[Path], dict[str, str]] | None:
    from app.services.datasets.schema import _local_parquet  # (schema imports this module)

    return _local_parquet(path)


def not_parquet(path: str) -> Path | None:
    """A local file of parquet data that is not parquet at all (``PAR1`` neither at its start nor at its end), which
    Spark cannot read either; None when there is none, or Spark must look."""
    found = local_files(path)
    for file in found[0] if found is not None else []:
        try:
            with file.open("rb") as f:
                head = f.read(4)
                f.seek(-4, os.SEEK_END)
                tail = f.read(4)
        except OSError:
            return None
        if b"PAR1" not in (head, tail) and b"PARE" not in (head, tail):  # PARE: an encrypted footer
            return file
    return None


_NAMED = {".csv": "csv", ".txt": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json", ".ndjson": "json"}


def not_parquet_words(file: Path) -> str:
    """That a data file is not parquet, and the format its name says (a directory of ``part-00000.csv`` files
    registered without ``format`` is read as parquet)."""
    named = _NAMED.get(file.suffix.lower())
    fix = f"set format to {named}" if named else "is the format right?"
    if file.suffix.lower() == ".tsv":
        fix += ' and options.sep to "\\t"'
    return f"{file.name} is not a parquet file (no PAR1 at its start or end); {fix}"


def not_text(path: str, fmt: Format, options: dict[str, str]) -> str | None:
    """Why local data given as CSV or JSON lines cannot be: an empty file, parquet, or not UTF-8 where the options
    name no other encoding (Spark finds a multi-line JSON file's, and unpacks compressed files); None: it may be."""
    found = local_files(path)  # the data files of a file or a flat (or partitioned) directory, whatever they hold
    if not found:
        return None
    named, first = {k.lower(): v.lower() for k, v in options.items()}, found[0][0]  # option names know no case
    utf8 = (named.get("encoding") or named.get("charset") or "utf-8").replace("_", "-") in ("utf-8", "utf8")
    utf8 &= named.get("multiline") != "true" and not compressed([first], options)
    try:
        if len(found[0]) == 1 and first.stat().st_size == 0:  # (a directory's empty files are not data files)
            return f"{first.name} is empty"
        with first.open("rb") as f:
            head = f.read(1 << 16)
        if head.startswith(b"PAR1"):
            return f"{first.name} is parquet (it starts with PAR1), not {fmt}; set format to parquet or omit it"
        if utf8:
            codecs.getincrementaldecoder("utf-8")().decode(head, final=False)  # a character cut at the end is fine
    except UnicodeDecodeError as exc:
        return (f"{first.name} is not UTF-8 text (at byte offset {exc.start}): name its encoding in "
                "options.encoding, or name a text file")  # fmt: skip
    except OSError:
        return None
    return None


def _doubled(sep: str) -> re.Pattern[str]:
    """A quote doubled inside a field (East ""side""); an empty quoted field (two quotes between separators) is not
    one."""
    other = re.escape(sep) if len(sep) == 1 else ""
    return re.compile(rf'[^\s"\\{other}]""|""[^\s"{other}]')  # \"" : Spark's own escape, then the closing quote


def doubled_quotes(path: str, fmt: Format, options: dict[str, str]) -> str | None:
    """A warning for local CSV that writes a quote inside a quoted field by doubling it (pandas, Excel, RFC 4180)
    while ``options`` leave Spark's escape at its default, a backslash: Spark then keeps the quotes in the value and
    may shift the rest of the line into the next columns; None when there is none, or Spark must look."""
    named = {k.lower(): v for k, v in options.items()}
    if fmt != "csv" or "escape" in named or named.get("quote", '"') != '"':
        return None
    found = local_files(path)
    if not found or compressed(found[0][:1], options):
        return None
    first = found[0][0]
    encoding = named.get("encoding") or named.get("charset") or "utf-8"
    try:
        with first.open("rb") as f:
            head = f.read(1 << 16).decode(encoding, errors="replace")
    except (OSError, LookupError):
        return None
    seen = _doubled(named.get("sep", named.get("delimiter", ","))).search(head)
    if seen is None:
        return None
    line = head.count("\n", 0, seen.start()) + 1
    return (
        f"{first.name} writes a quote inside a quoted field by doubling it (line {line}: {seen.group(0)!r}), as "
        "pandas and Excel do; Spark reads such a value with its quotes, and may shift the rest of the line into the "
        'next columns, unless options.escape is a quote: register it with options {"escape": "\\""}'
    )
