"""Whether local CSV text reads the same on the driver (pyarrow) as in Spark (univocity), quotes and escapes
included; where it may not, the driver leaves the data to Spark (its schema, summary and values).

The two readers agree on a line whose fields are each either unquoted, without the escape character (Spark keeps
it, pyarrow drops it: ``C:\\temp``), or quoted and closed right before the separator or the line's end (Spark keeps
``"a"b`` whole, quotes and all, and drops the blank of ``"a" ,``), with inside it no other quote than one escaped:
``\\"`` (or ``\\\\``) with Spark's default escape, a doubled quote ``""`` with ``escape: '"'`` (RFC 4180: pandas,
Excel, R). Without that option Spark reads a doubled quote as two quotes and, the field not being closed where the
quote is, the value raw up to the next separator: ``"East ""side"" 1, st"`` is the two fields ``"East ""side"" 1``
and `` st"``, where pyarrow reads one, ``East "side" 1, st``. A quote left open at the line's end is a malformed
line, which the driver's summary reads as Spark does.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

_BLOCK = 8 << 20
"""Characters read at a time when the files are checked."""


@lru_cache(maxsize=32)
def _odd_line(sep: str, quote: str, escape: str, comment: str) -> re.Pattern[str]:
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
        line = rf"(?:{field}{s})*+(?:{field}|{q}{content}*+)"  # the last: a quote left open (a malformed line)
    skipped = rf"{re.escape(comment)}[^\n]*|" if comment else ""
    return re.compile(rf"^(?!(?:{skipped}{line})\r?$)", re.MULTILINE)


def _pattern(options: dict[str, str]) -> re.Pattern[str] | None:
    """The pattern for CSV reader options (lower-cased names); None when the driver does not read such text."""
    sep = options.get("sep", options.get("delimiter", ","))
    quote, escape = options.get("quote", '"'), options.get("escape", "\\")
    comment = options.get("comment", "")
    if len(sep) != 1 or len(quote) > 1 or len(escape) > 1 or len(comment) > 1:
        return None
    return _odd_line(sep, quote, escape, comment)


def reads_alike(text: str, options: dict[str, str]) -> bool:
    """Whether CSV text (whole lines) reads the same on the driver as in Spark with these reader options
    (lower-cased names)."""
    pattern = _pattern(options)
    return pattern is not None and pattern.search(text) is None


def files_read_alike(files: list[Path], options: dict[str, str], encoding: str) -> bool:
    """:func:`reads_alike` for every line of the files, read a block of whole lines at a time."""
    pattern = _pattern(options)
    if pattern is None:
        return False
    try:
        for file in files:
            with file.open(encoding=encoding, errors="replace", newline="") as f:
                rest = ""
                while block := f.read(_BLOCK):
                    text = rest + block
                    end = text.rfind("\n") + 1
                    if pattern.search(text, 0, end) is not None:
                        return False
                    rest = text[end:]
                if rest and pattern.search(rest) is not None:
                    return False
    except (OSError, LookupError):
        return False
    return True
