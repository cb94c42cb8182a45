"""Every error leaves as RFC 9457 ``application/problem+json``, from these handlers only."""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.core.errors import PROBLEM_BASE, AppError, first_of, message
from app.services.health import DATABASE_AWAY

log = logging.getLogger("sparktrain.api")
PROBLEM_JSON = "application/problem+json"

_HTTP_TITLES = {
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    413: ("payload-too-large", "Payload too large"),
}


def is_v2(path: str) -> bool:
    """Whether a path is the V2 inference protocol's (its errors carry an ``error`` member): ``/v2`` itself too."""
    return path == "/v2" or path.startswith("/v2/")


def problem_response(body: dict[str, Any], request: Request, headers: dict[str, str] | None = None) -> JSONResponse:
    if is_v2(request.url.path):
        body.setdefault("error", body.get("detail"))  # the V2 inference protocol's error member
    request_id = getattr(request.state, "request_id", None)
    if request_id:
        body.setdefault("request_id", request_id)
    body.setdefault("instance", request.url.path)
    content = _encodable(jsonable_encoder(body))
    return JSONResponse(content, status_code=body["status"], media_type=PROBLEM_JSON, headers=headers)


_UNENCODABLE = re.compile("[\ud800-\udfff]")
"""Lone surrogates: JSON text may escape them (``"\\ud800"``), UTF-8 cannot hold them."""


def _encodable(value: Any) -> Any:
    """``value`` with every lone surrogate in its text written as its escape (``\\ud800``): a problem that echoes
    one (a path, a name) failed to encode as UTF-8, and the 422 became a 500."""
    if isinstance(value, str):
        return _UNENCODABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", value) if _UNENCODABLE.search(value) else value
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encodable(v) for v in value]
    return value


async def _app_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AppError)
    return problem_response(exc.problem(), request, headers=exc.headers or None)


def _loc(parts: tuple[Any, ...] | list[Any]) -> str:
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    raw = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in raw):
        where = next(e for e in raw if e.get("type") == "json_invalid")
        detail = f"The body is not valid JSON: {where.get('ctx', {}).get('error', 'parse error')}"
        position = [p for p in where.get("loc", ()) if isinstance(p, int)]
        if position:  # pydantic's offset into the body, counted from 0
            detail += f" at character {position[0] + 1}"
        detail += _file_name_hint(getattr(exc, "body", None))
        body = {
            "type": PROBLEM_BASE + "malformed-json",
            "title": "Malformed JSON",
            "status": 400,
            "detail": detail,
        }
        return problem_response(body, request)
    if raw and all(e.get("type") == "missing" and tuple(e.get("loc", ())) == ("body",) for e in raw):
        detail = "The request has no body: send the JSON body (curl: -d @body.json, or -d '{...}')."
        errors = [{"loc": "body", "in": "body", "msg": detail, "type": "missing"}]
        body = {"type": PROBLEM_BASE + "validation", "title": "Request validation failed", "status": 422}
        return problem_response({**body, "detail": detail, "errors": errors}, request)
    errors = []
    for e in raw:
        loc = list(e.get("loc", ()))
        if loc and loc[0] in ("body", "query", "path", "header"):
            source, loc = loc[0], loc[1:]
        else:
            source = "body"
        errors.append({"loc": _loc(loc) or source, "in": source, "msg": message(e), "type": e.get("type")})
    body = {
        "type": PROBLEM_BASE + "validation",
        "title": "Request validation failed",
        "status": 422,
        "detail": first_of(errors),
        "errors": errors,
    }
    return problem_response(body, request)


def _file_name_hint(raw: object) -> str:
    """For a body that is a file's name (``curl -d examples/x.json``, without the ``@``): how to send the file."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw if isinstance(raw, str) else ""
    name = text.strip()
    if len(name) <= 200 and re.fullmatch(r"[\w./~-]+\.json", name):
        return f". The body is the text {name!r}: curl sends what follows -d as it is; -d @{name} sends the file"
    return ""


_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def _allowed_methods(request: Request, given: str | None) -> str:
    """Every method the API documents at this path. Starlette's own ``Allow`` names only the methods of the first
    route whose path matches (``GET /datasets`` and ``POST /datasets`` are two routes)."""
    methods = {m.strip().upper() for m in (given or "").split(",") if m.strip()}
    for template, item in request.app.openapi().get("paths", {}).items():
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, request.url.path):
            methods |= {m.upper() for m in item if m in _METHODS}
    if "GET" in methods:
        methods.add("HEAD")  # app/api/http_semantics.py answers HEAD wherever GET is answered
    return ", ".join(sorted(methods))


def _without_slash(request: Request) -> str | None:
    """The path without its trailing slash(es) when a route answers there (a 404 names it; app/main.py says why
    there is no redirect)."""
    path = request.scope.get("path", "")
    if len(path) < 2 or not path.endswith("/"):
        return None
    scope = {**request.scope, "path": path.rstrip("/") or "/"}
    for context in iter_route_contexts(list(request.app.routes)):
        if context.matches(scope)[0] != Match.NONE:
            return str(scope["path"])
    return None


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    kind, title = _HTTP_TITLES.get(exc.status_code, ("http-error", "HTTP error"))
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    headers = getattr(exc, "headers", None)
    if exc.status_code == 404 and detail == "Not Found":
        detail = f"No endpoint at {request.method} {request.url.path}; see /docs for the API."
        without = _without_slash(request)
        if without is not None:
            detail = (
                f"No endpoint at {request.method} {request.url.path}: the path is {without}, without the trailing "
                "slash (requests are not redirected)."
            )
    if exc.status_code == 400 and isinstance(exc.__cause__, ValueError):  # FastAPI's "There was an error parsing
        kind, title = "malformed-json", "Malformed JSON"  # the body" (a JSON syntax error is a json_invalid)
        cause = exc.__cause__
        why = (str(cause).splitlines() or [type(cause).__name__])[0][:200]  # e.g. a number of over 4300 digits
        if isinstance(cause, UnicodeDecodeError):
            why = "it is not UTF-8 text (send JSON encoded as UTF-8)"
        detail = f"The body is not valid JSON: {why}."
    if exc.status_code == 405:
        allowed = _allowed_methods(request, (headers or {}).get("Allow"))
        headers = {**(headers or {}), "Allow": allowed}
        detail = f"{request.url.path} answers {allowed}, not {request.method}."
    body = {"type": PROBLEM_BASE + kind, "title": title, "status": exc.status_code, "detail": detail}
    return problem_response(body, request, headers=headers)


async def _database_away(request: Request, exc: Exception) -> JSONResponse:
    """The database is restarting or unreachable: a 503 the client may retry, never the driver's raw error."""
    log.warning("%s %s: the database is away (%s)", request.method, request.url.path, type(exc).__name__)
    body = {
        "type": PROBLEM_BASE + "database-unavailable",
        "title": "Database unavailable",
        "status": 503,
        "detail": "The service's database does not answer right now (a restart?); try again in a few seconds.",
    }
    return problem_response(body, request, headers={"Retry-After": "5"})


async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    body = {
        "type": PROBLEM_BASE + "internal",
        "title": "Internal error",
        "status": 500,
        "detail": "The service failed to answer this request; the request id locates the error in its log.",
    }
    return problem_response(body, request)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(AppError, _app_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    for away in DATABASE_AWAY:
        app.add_exception_handler(away, _database_away)
    app.add_exception_handler(Exception, _unhandled)
