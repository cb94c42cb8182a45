"""What the service answers, checked before it is used. Something at the URL that answers JSON of another shape
(another service, a proxy's error object, ``[]``) is "not a sparktrain service" (exit 2), not a KeyError traceback
or ``id None``."""

from __future__ import annotations

from typing import Any

Kinds = type | tuple[type, ...]
NUMBER = (int, float)

JOB: dict[str, Kinds] = {"id": str, "status": str}
JOB_OPTIONAL: dict[str, Kinds] = {"error": dict, "model": dict, "warnings": list, "progress": NUMBER}
LISTED_JOB: dict[str, Kinds] = {**JOB, "type": str, "progress": NUMBER, "created_at": str}
MODEL: dict[str, Kinds] = {"name": str, "versions": list, "aliases": dict}
MODEL_OPTIONAL: dict[str, Kinds] = {"latest_version": int}
METRIC: dict[str, Kinds] = {"key": str, "step": int, "value": NUMBER}
LOG_LINE: dict[str, Kinds] = {"id": int, "message": str}
DATASET: dict[str, Kinds] = {"id": str, "uri": str}


class WrongShape(ValueError):
    """An answer that is JSON, but not what a sparktrain service answers there (the message says what is off)."""


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, NUMBER) else type(value).__name__)


def _is(value: Any, kinds: Kinds) -> bool:
    wanted = kinds if isinstance(kinds, tuple) else (kinds,)
    if isinstance(value, bool) and bool not in wanted:  # True is an int to Python, not to JSON
        return False
    return isinstance(value, wanted)


def checked(value: Any, fields: dict[str, Kinds], optional: dict[str, Kinds] | None = None) -> dict[str, Any]:
    """``value`` when it is an object with ``fields`` (each of its kinds) and, where present and not null, the
    ``optional`` ones; else :class:`WrongShape`."""
    if not isinstance(value, dict):
        raise WrongShape(f"{_kind(value)}, not an object")
    for key, kinds in fields.items():
        if key not in value:
            raise WrongShape(f"an object without {key!r}")
        if not _is(value[key], kinds):
            raise WrongShape(f"{key!r} as {_kind(value[key])}")
    for key, kinds in (optional or {}).items():
        if value.get(key) is not None and not _is(value[key], kinds):
            raise WrongShape(f"{key!r} as {_kind(value[key])}")
    return value


def items(
    value: Any, key: str, fields: dict[str, Kinds], optional: dict[str, Kinds] | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """A page: the objects under ``key`` (each checked as :func:`checked` does) and its ``next_cursor`` (None: the
    last page)."""
    page = checked(value, {key: list}, {"next_cursor": str})
    return [checked(item, fields, optional) for item in page[key]], page.get("next_cursor")


def wrong(reason: str) -> None:
    """Raise :class:`WrongShape` (for a check :func:`checked` cannot say)."""
    raise WrongShape(reason)
