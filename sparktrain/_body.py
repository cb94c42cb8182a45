"""JSON as the service takes it: a request body read from a file or stdin, and a cell of ``predict --csv``. Python's
json reads ``NaN``, ``Infinity`` and ``-Infinity``, which JSON has not (httpx then refuses to send them: a
traceback); here they are refused where they are written, as a syntax error is."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from sparktrain.errors import LocalFileError

_CONSTANT = re.compile(r'"(?:\\.|[^"\\])*"|(-?Infinity|NaN)')
"""A string (skipped whole), or a constant outside one."""


class NotJson(ValueError):
    """Text that is not JSON, or holds a number JSON has not."""


def strict_loads(text: str) -> Any:
    """``json.loads`` without ``NaN``/``Infinity``: :class:`NotJson` names the first one, with its line and column as
    json's own errors do."""

    def refuse(name: str) -> Any:
        raise NotJson(name)

    try:
        return json.loads(text, parse_constant=refuse)
    except NotJson:
        pass  # where it is: the first constant outside a string (the text is JSON otherwise, up to it)
    except ValueError as exc:
        raise NotJson(str(exc)) from None
    found = next((m for m in _CONSTANT.finditer(text) if m[1]), None)
    if found is None:  # not reached: json.loads found one
        raise NotJson("NaN or Infinity is not a JSON number")
    line = text.count("\n", 0, found.start()) + 1
    column = found.start() - text.rfind("\n", 0, found.start())
    raise NotJson(f"{found[1]} is not a JSON number (line {line} column {column})")


def read_body(source: str) -> dict[str, Any]:
    """A request body: the JSON object in the file ``source``, or on stdin for ``-``. :class:`LocalFileError` names
    the file (``stdin``) and says what is wrong."""
    name = "stdin" if source == "-" else source
    try:
        if source == "-":
            if sys.stdin is None:  # started with stdin closed (<&-)
                raise LocalFileError("-: stdin is closed; give the body on stdin, or a file")
            text = sys.stdin.read()
        else:
            with open(source, encoding="utf-8") as handle:
                text = handle.read()
    except OSError as exc:
        raise LocalFileError(f"{name}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise LocalFileError(f"{name}: not JSON: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    try:
        body = strict_loads(text)
    except NotJson as exc:
        raise LocalFileError(f"{name}: not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise LocalFileError(f"{name}: the body must be a JSON object")
    return body
