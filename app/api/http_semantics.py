"""HTTP semantics the framework leaves out, as one pure ASGI middleware, innermost of the app's (after the guard):

- ``HEAD`` wherever ``GET`` (RFC 9110 §9.3.2): FastAPI's routes answer only the methods they name. A HEAD runs as the
  GET and leaves with the GET's status and headers and no body; a streamed answer (an event stream, a download) ends
  right after its headers, and the app's ``receive()`` then reports ``http.disconnect`` so that the stream stops.
- Query parameters are checked as strictly as bodies: one the operation does not take, or a single-valued one given
  twice, is a 422 problem naming it (FastAPI ignores the first and keeps the last of the second, so ``?state=FAILED``
  for ``?status=FAILED`` listed every job). Each operation's parameters come from its dependant, sub-dependencies
  included, read once from the routes: a parameter added to a route is accepted without touching this module.
  Pages outside the OpenAPI document (Swagger UI, ReDoc, the console, whose scripts read their own query) are left
  alone.
"""

from __future__ import annotations

import typing
from collections import abc
from collections.abc import Iterable
from dataclasses import dataclass
from types import UnionType
from typing import Any
from urllib.parse import unquote_plus

import anyio
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel
from starlette.requests import Request
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import problem_response
from app.core.errors import ValidationFailed

_DISCONNECT: Message = {"type": "http.disconnect"}
_SEQUENCES = (list, tuple, abc.Sequence, abc.Set)


class HttpSemantics:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._routes: _Routes | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        head = scope["method"] == "HEAD"
        if head:
            # A copy: the middleware outside (HttpMetrics) still counts a HEAD. Spec 2.3 makes Starlette's
            # StreamingResponse listen to receive() for the disconnect that ends it (2.4 relies on send() failing).
            scope = {**scope, "method": "GET", "asgi": {**scope.get("asgi", {}), "spec_version": "2.3"}}
        if scope.get("query_string"):
            error = self._check_query(scope)
            if error is not None:
                await problem_response(error.problem(), Request(scope))(scope, receive, send)
                return
        if head:
            await _as_head(self.app, scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def _check_query(self, scope: Scope) -> ValidationFailed | None:
        if self._routes is None:  # app/main.py builds it at start-up; an app without that, on its first query
            app = scope["app"]
            self._routes = getattr(app.state, "http_routes", None) or _Routes(app.routes)
        entry = self._routes.match(scope)
        if entry is None or entry.query is None:
            return None
        return entry.query.check(scope["query_string"].decode("latin-1"))


def prepare_routes(app: Any) -> None:
    """Read every route's query parameters once, at start-up (``app.routes`` is complete by then). FastAPI builds the
    handlers of included routes on first use: this builds them all here, before any request or background thread."""
    app.state.http_routes = _Routes(app.routes)


async def _as_head(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Run the GET, send its start, end the response at once and drop whatever body follows."""
    ended = anyio.Event()

    async def send_head(message: Message) -> None:
        if ended.is_set():
            return
        if message["type"] == "http.response.start":
            await send(message)
            ended.set()  # before the await below: the app's receive() sees the end while the server takes it
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        elif message["type"] == "http.response.body":  # no start before: not a valid ASGI answer, pass it on
            await send(message)

    async def receive_head() -> Message:
        """The server's messages until the response ended, then ``http.disconnect``: a stream listening for it
        stops, while the server, whose response is complete, may not say so for as long as the connection lives."""
        if ended.is_set():
            return _DISCONNECT
        got: Message = _DISCONNECT
        async with anyio.create_task_group() as group:

            async def from_server() -> None:
                nonlocal got
                got = await receive()
                group.cancel_scope.cancel()

            group.start_soon(from_server)
            await ended.wait()
            group.cancel_scope.cancel()
        return got

    await app(scope, receive_head, send_head)


@dataclass(frozen=True)
class _Query:
    """The query parameters of one operation: their names in declaration order, and those that take a list."""

    operation: str
    names: tuple[str, ...]
    many: frozenset[str]

    def check(self, query: str) -> ValidationFailed | None:
        given = _names(query)
        if all(name in self.names and (count == 1 or name in self.many) for name, count in given.items()):
            return None
        errors: list[dict[str, Any]] = []
        takes = f"{self.operation} takes {', '.join(self.names)}" if self.names else f"{self.operation} takes none"
        for name, count in given.items():
            if name not in self.names:
                msg = f"unknown query parameter; {takes}"
                errors.append({"loc": name, "in": "query", "msg": msg, "type": "extra_forbidden"})
            elif count > 1 and name not in self.many:
                msg = f"given {count} times; it takes one value"
                errors.append({"loc": name, "in": "query", "msg": msg, "type": "multiple_values"})
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return ValidationFailed(f"{errors[0]['loc']}: {errors[0]['msg']}{more}", errors=errors)


def _names(query: str) -> dict[str, int]:
    """How often each name occurs in a query string, names decoded as Starlette's ``QueryParams`` decodes them
    (``parse_qsl`` keeping blank values), without decoding the values."""
    counts: dict[str, int] = {}
    for piece in query.split("&"):
        if piece:
            name = piece.partition("=")[0]
            if "%" in name or "+" in name:
                name = unquote_plus(name, errors="replace")
            counts[name] = counts.get(name, 0) + 1
    return counts


@dataclass(frozen=True)
class _Entry:
    """One route: its path pattern (None: a kind of route this module cannot match, where lookups stop), its methods
    (None: any, a mount), its query parameters (None: not checked) and its path's first segment (None: any)."""

    pattern: Any
    methods: frozenset[str] | None
    query: _Query | None
    first: str | None


class _Routes:
    """The app's routes in routing order, indexed by the first segment of their path."""

    def __init__(self, routes: Iterable[Any]) -> None:
        entries = list(_entries(routes))
        self._any = [e for e in entries if e.first is None]
        self._by_first = {f: [e for e in entries if e.first in (f, None)] for f in {e.first for e in entries}}

    def match(self, scope: Scope) -> _Entry | None:
        """The route the router will hand the request to (the first that matches path and method), as Starlette
        looks it up; None when none does (a 404 or 405 follows) or when a route of an unknown kind comes first."""
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):  # as starlette's get_route_path
            path = "" if path == root else path[len(root) :] if path[len(root)] == "/" else path
        for entry in self._by_first.get(path[1:].split("/", 1)[0], self._any):
            if entry.pattern is None:
                return None
            if entry.pattern.match(path) and (entry.methods is None or scope["method"] in entry.methods):
                return entry
        return None


def _entries(routes: Iterable[Any]) -> Iterable[_Entry]:
    for context in iter_route_contexts(list(routes)):
        route = context.original_route
        if isinstance(route, WebSocketRoute):
            continue  # never matches an HTTP request
        if not isinstance(route, (APIRoute, Route, Mount)):
            yield _Entry(None, None, None, None)
            continue
        segment = str(context.path)[1:].split("/", 1)[0]
        first = segment if segment and "{" not in segment else None
        if isinstance(route, Mount):
            yield _Entry(route.path_regex, None, None, first)
            continue
        methods = frozenset(context.methods or ())
        query = None
        if isinstance(route, APIRoute) and context.include_in_schema and context.dependant is not None:
            names, many = _query_params(context.dependant)
            query = _Query(f"{'/'.join(sorted(methods))} {context.path}", names, many)
        yield _Entry(context.path_regex, methods, query, first)


def _query_params(dependant: Dependant) -> tuple[tuple[str, ...], frozenset[str]]:
    names: dict[str, None] = {}
    many: set[str] = set()
    seen: set[int] = set()
    stack = [dependant]
    while stack:
        current = stack.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        for field in current.query_params:
            annotation = field.field_info.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):  # a model of query parameters
                for name, inner in annotation.model_fields.items():
                    names[inner.alias or name] = None
                    many |= {inner.alias or name} if _takes_many(inner.annotation) else set()
            else:
                names[field.alias] = None
                many |= {field.alias} if _takes_many(annotation) else set()
        stack.extend(current.dependencies)
    return tuple(names), frozenset(many)


def _takes_many(annotation: Any) -> bool:
    """Whether a query parameter of this type takes repeated values (``list[str]``, ``set[int] | None``, ...)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _takes_many(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is UnionType:
        return any(_takes_many(arg) for arg in typing.get_args(annotation))
    kind = origin or annotation
    return isinstance(kind, type) and issubclass(kind, _SEQUENCES) and not issubclass(kind, (str, bytes))
