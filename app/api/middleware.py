"""Pure ASGI middleware, in this order: a request id, no NUL bytes in URLs, the API key (``app/api/auth.py``), JSON-only
bodies, a body size limit and a nesting limit (both checked before the body is parsed).

The size limit is :data:`OTHER_BODY_BYTES` except where rows travel (``/predict``, the V2 protocol under ``/v2/``):
FastAPI parses a body on the event loop, and an 8 MB ``/train`` body held every other request (health checks too)
for seconds, while no such body needs more than a few kilobytes. ``/predict`` parses large bodies off the loop
(app/api/json_body.py)."""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.auth import identify
from app.api.errors import is_v2
from app.core.errors import AppError, BadRequest, NestedJson, PayloadTooLarge, UnsupportedMediaType
from app.core.logging import REQUEST_ID

_JSON_TYPE = re.compile(r"^application/([a-z0-9.+-]*\+)?json$")
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


class RequestGuard:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, b"x-request-id")
        request_id = given if given and _SAFE_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        REQUEST_ID.set(request_id)  # for log lines (app/core/logging.py); each request runs in a task of its own

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        if "\x00" in scope.get("path", "") or b"%00" in scope.get("query_string", b""):
            # No path or query parameter of this API takes one, and PostgreSQL refuses them in text.
            await _problem(send_with_id, scope, BadRequest("The URL holds a NUL byte (%00)."))
            return
        try:
            caller = identify(scope, _header(scope, b"authorization"))
        except AppError as exc:
            await _problem(send_with_id, scope, exc)
            return
        if caller is not None:
            scope["state"]["caller"] = caller
        if scope["method"] in ("POST", "PUT", "PATCH"):
            length = _header(scope, b"content-length")
            chunked = _header(scope, b"transfer-encoding") is not None
            has_body = chunked or (length is not None and length.strip() not in ("", "0"))
            v2 = scope.get("path", "").startswith("/v2/")  # JSON, or JSON + binary tensors (its own extension)
            limit = self.max_body_bytes if v2 or scope.get("path") == "/predict" else OTHER_BODY_BYTES
            limit = min(limit, self.max_body_bytes)
            if length is not None and length.strip().isdigit() and int(length) > limit:
                await _drain(receive, DRAIN_BYTES)
                await _too_large(send_with_id, scope, f"The body has {int(length)} bytes; at most {limit} are "
                                 f"accepted{_WHERE_ROWS if limit < self.max_body_bytes else ''}.")  # fmt: skip
                return
            media = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
            if has_body and not _JSON_TYPE.match(media) and not v2:
                detail = f"Send the body as application/json (got {media or 'no Content-Type'})."
                await _problem(send_with_id, scope, UnsupportedMediaType(detail))
                return
            if v2 or not has_body:
                receive = _limited(receive, limit)
            else:
                body = await _read_body(receive, limit)
                if body is None:
                    await _drain(receive, DRAIN_BYTES)
                    await _too_large(send_with_id, scope, f"The body is larger than {limit} bytes"
                                     f"{_WHERE_ROWS if limit < self.max_body_bytes else ''}.")  # fmt: skip
                    return
                depth = json_depth(body)
                if depth > MAX_JSON_DEPTH:
                    detail = (
                        f"The JSON body nests {depth} levels deep; at most {MAX_JSON_DEPTH} are accepted (no request "
                        "of this API needs more): flatten it."
                    )
                    await _problem(send_with_id, scope, NestedJson(detail))
                    return
                receive = _replay(body, receive)
        await self.app(scope, receive, send_with_id)


OTHER_BODY_BYTES = 1024 * 1024
"""The largest body of an endpoint that takes no rows (everything but ``/predict`` and ``/v2/``)."""
_WHERE_ROWS = " (rows go to /predict, whose bodies may be larger, or into a dataset)"


class _PrintableArgs(logging.Filter):
    """A logged request's fields with their control characters escaped: ``GET /x%0A<a forged line>`` without a key
    wrote a second, made-up line into the text log (``refused GET /x`` and then the client's words)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(printable(a) if isinstance(a, str) else a for a in record.args)
        return True


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with its control characters (line breaks among them) written as escapes (``\\n``, ``\\x1b``)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


logging.getLogger("sparktrain.api.auth").addFilter(_PrintableArgs())  # its "refused" line names the path


MAX_JSON_DEPTH = 64
"""Arrays and objects inside each other. Parsers, validators and encoders recurse per level: past about a thousand
levels the JSON parser itself fails (RecursionError), and fewer still reach code that walks the request. No request of
this API needs more than a handful, so deeper bodies are refused before parsing, with an answer that says why."""
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')


def json_depth(body: bytes) -> int:
    """How deep arrays and objects nest in a JSON text (brackets inside strings do not count); 0 when it cannot
    exceed MAX_JSON_DEPTH. Linear and vectorized: about 1.5 ms for half a megabyte of records."""
    if body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH:
        return 0
    import numpy as np

    if b"\\" in body:  # escaped quotes: drop whole strings; otherwise every quote opens or closes one
        body = _JSON_STRING.sub(b"", body)
    structure = np.frombuffer(body.translate(None, _NOT_STRUCTURE), dtype=np.uint8)
    step = (structure == ord("[")).astype(np.int8) + (structure == ord("{")) - (structure == ord("]"))
    step -= structure == ord("}")
    step[(np.cumsum(structure == ord('"'), dtype=np.int32) & 1).astype(bool)] = 0
    return int(np.cumsum(step, dtype=np.int32).max()) if step.size else 0


DRAIN_BYTES = 64 * 1024 * 1024
"""How much of a body too large to take is read and dropped before the 413: a server that answers and closes while
the client still sends leaves unread bytes, the kernel then resets the connection, and the client (which reads only
once it has sent everything) loses the answer ("Server disconnected without sending a response"). Past this the
answer goes out at once, and such a client may see the reset instead."""


async def _drain(receive: Receive, limit: int) -> None:
    """Read and drop the rest of the body, up to ``limit`` bytes, or until the client leaves."""
    seen = 0
    while seen <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return
        seen += len(message.get("body", b""))
        if not message.get("more_body", False):
            return


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None when it passes ``limit`` bytes (or the client left)."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body read already, as one message; afterwards whatever the server sends (a disconnect)."""
    done = False

    async def replayed() -> Message:
        nonlocal done
        if not done:
            done = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


class _BodyTooLarge(HTTPException):
    """Raised while the app reads the body; an HTTPException so FastAPI passes it on to the problem handler."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"The body is larger than {limit} bytes.")


def _limited(receive: Receive, limit: int) -> Receive:
    seen = 0

    async def wrapped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                if message.get("more_body", False):
                    await _drain(receive, DRAIN_BYTES)
                raise _BodyTooLarge(limit)
        return message

    return wrapped


async def _too_large(send: Send, scope: Scope, detail: str) -> None:
    await _problem(send, scope, PayloadTooLarge(detail))


async def _problem(send: Send, scope: Scope, error: AppError) -> None:
    """The problem+json answer of ``error``, as app/api/errors.py renders it for the app (this runs before it)."""
    status, detail, headers = error.status, error.detail, error.headers
    body: dict[str, Any] = {
        **error.problem(),
        "instance": scope.get("path", ""),
        "request_id": scope.get("state", {}).get("request_id"),
    }
    if is_v2(scope.get("path", "")):
        body["error"] = detail  # the V2 inference protocol's error member, as app/api/errors.py adds it
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"content-length", str(len(payload)).encode()),
                *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
