"""Whether local CSV text reads the same on the driver (pyarrow) as in Spark (univocity), quotes and escapes
included; where it may not, the driver leaves the data to Spark (its schema, summary and values).

The two readers agree on a line whose fields are each either unquoted, without the escape character (Spark keeps
it, pyarrow drops it: ``C:\\temp``), or quoted and closed right before the separator or the line's end (Spark keeps
``"a"b`` whole, quotes and all, and drops the blank of ``"a" ,``), with inside it no other quote than one escaped:
``\\"`` (or ``\\\\``) with Spark's default escape, a doubled quote ``""`` with ``escape: '"'`` (RFC 4180: pandas,
Excel, R). Without that option Spark reads a doubled quote as two quotes and, the field not being closed where the
quote is, the value raw up to the next separator: ``"East ""side"" 1, st"`` is the two fields ``"East ""side"" 1``
and `` st"``, where pyarrow reads one, ``East "side" 1, st``. A quote left open at the line's end is a malformed
line to Spark, which ends the value there; pyarrow reads on past the line's end for the closing quote (the rest of
the file, or the lines up to the next quote, in one value): only the driver's summary, which parses such lines
itself, reads them as Spark does (``open_quotes``).

A file's verdict is kept for its path, size and modification time (a column's values are read once per request
for each categorical column: the check ran again each time), and text with neither the quote nor the escape
character (nor a lone carriage return) is alike without the pattern.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

_BLOCK = 8 << 20
"""Characters read at a time when the files are checked."""


@lru_cache(maxsize=32)
def _odd_line(sep: str, quote: str, escape: str, comment: str, open_quotes: bool) -> re.Pattern[str]:
    """The start of a line the two readers may read differently (a line that is not of the form above)."""
    s, q, e = re.escape(sep), re.escape(quote), re.escape(escape)
    escaping = bool(escape) and escape != quote
    if not quote:
        unquoted = rf"[^{s}{e}\r\n]*" if escaping else rf"[^{s}\r\n]*"
        line = rf"(?:{unquoted}{s})*+{unquoted}"
    else:
        content = rf"(?:[^{q}{e}\r\n]|{e}[{q}{e}])" if escaping else rf"(?:[^{q}\r\n]|{q}{q})"
        unquoted = rf"(?:[^{s}{q}{e}\r\n][^{s}{e}\r\n]*)?" if escaping else rf"(?:[^{s}{q}\r\n][^{s}\r\n]*)?"
        field = rf"(?>{q}{content}*+{q}|{unquoted})"
        last = rf"(?:{field}|{q}{content}*+)" if open_quotes else field  # a quote left open (a malformed line)
        line = rf"(?:{field}{s})*+{last}"
    skipped = rf"{re.escape(comment)}[^\n]*|" if comment else ""
    return re.compile(rf"^(?!(?:{skipped}{line})\r?$)", re.MULTILINE)


def _reader(options: dict[str, str]) -> tuple[str, str, str, str] | None:
    """(separator, quote, escape, comment) of CSV reader options (lower-cased names); None when the driver does not
    read such text."""
    sep = options.get("sep", options.get("delimiter", ","))
    quote, escape = options.get("quote", '"'), options.get("escape", "\\")
    comment = options.get("comment", "")
    if len(sep) != 1 or len(quote) > 1 or len(escape) > 1 or len(comment) > 1:
        return None
    return sep, quote, escape, comment


def _plain(text: str, quote: str, escape: str, end: int) -> bool:
    """Whether ``text[:end]`` holds neither the quote nor the escape character, nor a carriage return but before a
    line feed: every such line is of the form above (its fields unquoted, the pattern's comment lines only add
    lines that match), checked at C speed."""
    if (quote and text.find(quote, 0, end) >= 0) or (escape and text.find(escape, 0, end) >= 0):
        return False
    return text.find("\r", 0, end) < 0 or text.count("\r", 0, end) == text.count("\r\n", 0, end)


def reads_alike(text: str, options: dict[str, str], *, open_quotes: bool = False) -> bool:
    """Whether CSV text (whole lines) reads the same on the driver as in Spark with these reader options
    (lower-cased names); ``open_quotes``: a quote left open at a line's end counts as alike (for a reader that
    parses such lines as Spark does)."""
    reader = _reader(options)
    if reader is None:
        return False
    if _plain(text, reader[1], reader[2], len(text)):
        return True
    return _odd_line(*reader, open_quotes).search(text) is None


def files_read_alike(files: list[Path], options: dict[str, str], encoding: str, *, open_quotes: bool = False) -> bool:
    """:func:`reads_alike` for every line of the files, read a block of whole lines at a time; the verdict is kept
    while no file changes (its path, size and modification time)."""
    reader = _reader(options)
    if reader is None:
        return False
    try:
        stamps = tuple((str(file), *_stamp(file)) for file in files)
    except OSError:
        return False
    return _verdict(stamps, reader, encoding, open_quotes)


def _stamp(file: Path) -> tuple[int, int, int, int]:
    """What changes when a file is written or replaced: its size and times, and its inode (a file replaced by a
    rename within one tick of a coarse clock keeps neither its inode nor, mostly, its change time)."""
    stat = file.stat()
    return stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino


@lru_cache(maxsize=256)
def _verdict(
    stamps: tuple[tuple[str, int, int, int, int], ...],
    reader: tuple[str, str, str, str],
    encoding: str,
    open_quotes: bool,
) -> bool:
    try:
        return all(_scan(Path(path), reader, encoding, open_quotes) for path, *_ in stamps)
    except (OSError, LookupError):
        return False


def _scan(file: Path, reader: tuple[str, str, str, str], encoding: str, open_quotes: bool) -> bool:
    """Whether every line of a file reads alike."""
    pattern = _odd_line(*reader, open_quotes)
    quote, escape = reader[1], reader[2]
    with file.open(encoding=encoding, errors="replace", newline="") as f:
        rest = ""
        while block := f.read(_BLOCK):
            text = rest + block
            end = text.rfind("\n") + 1
            if not _plain(text, quote, escape, end) and pattern.search(text, 0, end) is not None:
                return False
            rest = text[end:]
        return not rest or _plain(rest, quote, escape, len(rest)) or pattern.search(rest) is None
