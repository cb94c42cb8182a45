"""Cursors of the paged lists (``GET /jobs``, ``/datasets``, ``/models``, a job's metrics): opaque to clients,
each tagged with its list, so a cursor of another list (or one this service did not issue) is a 400."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from app.core.errors import BadRequest

_T = TypeVar("_T")


def encode(*parts: object) -> str:
    return base64.urlsafe_b64encode("|".join(map(str, parts)).encode()).decode().rstrip("=")


def decode(cursor: str, parse: Callable[[list[str]], _T]) -> _T:
    """``parse`` of the cursor's parts; a 400 when it raises ValueError (a cursor not issued for this list)."""
    try:
        return parse(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode().split("|"))
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise BadRequest("The cursor is not one this service issued for this list; start without it.") from exc


def encode_cursor(created_at: datetime, row_id: str, listing: str = "jobs") -> str:
    """The cursor after a row of a newest-first list (``listing``: jobs, datasets): its creation time and id."""
    return encode(listing, created_at.isoformat(), row_id)


def decode_cursor(cursor: str, listing: str = "jobs") -> tuple[datetime, str]:
    """(created_at, id) of :func:`encode_cursor` for ``listing``; a 400 for anything not issued for it."""
    return decode(cursor, lambda parts: _created_and_id(parts[1:] if parts[0] == listing else []))


def _created_and_id(parts: list[str]) -> tuple[datetime, str]:
    created, row_id = parts
    if len(row_id) != 32 or any(c not in "0123456789abcdef" for c in row_id):
        raise ValueError("not an id")  # e.g. a NUL byte, which PostgreSQL refuses in a query
    when = datetime.fromisoformat(created)
    if when.tzinfo is None:
        raise ValueError("no time zone")  # every cursor this service issues has one; the column refuses others
    return when, row_id


def encode_name_cursor(name: str) -> str:
    """The cursor after a row of a list in name order (``GET /models``): the name (a model name holds no ``|``)."""
    return encode("models", name)


def decode_name_cursor(cursor: str) -> str:
    return decode(cursor, _name)


def _name(parts: list[str]) -> str:
    tag, name = parts
    if tag != "models" or not name or "\x00" in name:
        raise ValueError("not a models cursor")
    return name
