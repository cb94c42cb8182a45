"""The one error hierarchy. Services raise these; one handler renders them as RFC 9457 problem+json."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workers.errors import SpecError
from workers.numbers import shown

PROBLEM_BASE = "https://sparktrain.dev/problems/"


class AppError(Exception):
    """An error with an HTTP status and a stable problem type. ``detail`` says what happened and how to fix it."""

    status: int = 500
    type: str = "internal"
    title: str = "Internal error"

    def __init__(
        self,
        detail: str,
        *,
        errors: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors
        self.headers = headers or {}
        """HTTP headers the answer carries (``WWW-Authenticate`` of a 401, ...)."""
        self.extra = extra

    def every_problem(self) -> str:
        """The detail, or where ``errors`` holds several fields' problems each of them (``a: x; b: y``): a job's
        error has no ``errors`` list to hold the rest of a detail's "(and 1 more)"."""
        if not self.errors or len(self.errors) < 2:
            return self.detail
        return "; ".join(f"{e.get('loc')}: {e.get('msg')}" for e in self.errors)

    def problem(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": PROBLEM_BASE + self.type,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        if self.errors is not None:
            body["errors"] = self.errors
        body.update(self.extra)
        return body


class BadRequest(AppError):
    status, type, title = 400, "bad-request", "Bad request"


class NestedJson(BadRequest):
    type, title = "nested-json", "JSON nested too deeply"


class Unauthorized(AppError):
    status, type, title = 401, "unauthorized", "Authentication required"


class Forbidden(AppError):
    status, type, title = 403, "forbidden", "Forbidden"


class NotFound(AppError):
    status, type, title = 404, "not-found", "Not found"


class Conflict(AppError):
    status, type, title = 409, "conflict", "Conflict"


class PayloadTooLarge(AppError):
    status, type, title = 413, "payload-too-large", "Payload too large"


class UnsupportedMediaType(AppError):
    status, type, title = 415, "unsupported-media-type", "Unsupported media type"


def message(error: Mapping[str, Any], *, show_input: bool = True) -> str:
    """A pydantic error's message without the "Value error, " that pydantic puts before a validator's own words;
    a number too large to be read as a whole number (``1e20``) says so, not pydantic's "Unable to parse input string
    as an integer, exceeded maximum size". ``show_input``: pydantic's own messages end with the value sent (not for
    settings, whose values may be secrets)."""
    kind, given = error.get("type"), error.get("input")
    if kind == "int_parsing_size":
        return f"must be a whole number in the field's range, got {shown(given)}"
    text = str(error.get("msg", "")).removeprefix("Value error, ")
    if show_input and kind not in _OWN_WORDS and isinstance(given, str | int | float | bool) and "got" not in text:
        text += f", got {shown(given)}"  # pydantic's own words leave out what was sent ("framework": "xgbost")
    return text


_OWN_WORDS = frozenset({"value_error", "assertion_error", "missing", "extra_forbidden", "json_invalid"})
"""Errors whose message already says what was wrong with the value (a validator's words), or that have none."""


class ValidationFailed(AppError):
    """The request is well-formed JSON but asks for something impossible; ``errors`` lists each field."""

    status, type, title = 422, "validation", "Request validation failed"

    @classmethod
    def at(cls, loc: str, msg: str, *, source: str = "body", **extra: Any) -> ValidationFailed:
        """One field's problem; ``source`` says where the field is (``body``, ``path``, ``query``), as pydantic's
        errors say it: every item of ``errors`` has ``loc``, ``in``, ``msg`` and ``type``."""
        return cls(f"{loc}: {msg}", errors=[{"loc": loc, "in": source, "msg": msg, "type": "value_error"}], **extra)

    @classmethod
    def of(cls, exc: SpecError) -> ValidationFailed:
        """A spec's problems, every one in ``errors``; the detail as :func:`first_of` says it."""
        errors = [{"loc": p.path, "in": "body", "msg": p.message, "type": "value_error"} for p in exc.problems]
        return cls(first_of(errors), errors=errors)


def first_of(errors: list[dict[str, Any]]) -> str:
    """A 422's detail: its first field's problem, and how many more ``errors`` lists (``a: x (and 2 more)``), as every
    422 says it (pydantic's, a spec's, a tune's base)."""
    first = errors[0] if errors else {"loc": "body", "msg": "invalid"}
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{first['loc']}: {first['msg']}{more}"


class ServiceUnavailable(AppError):
    status, type, title = 503, "unavailable", "Service unavailable"


class TooManyRequests(AppError):
    """Over a quota (app/services/quotas.py): the problem names it (``quota``, ``limit``) and ``Retry-After`` says
    when to try again."""

    status, type, title = 429, "quota-exceeded", "Quota exceeded"
