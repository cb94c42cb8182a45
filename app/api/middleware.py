"""Pure ASGI middleware: request ids, no NUL bytes in URLs, JSON-only bodies, and a body size limit (checked before
parsing)."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.errors import PROBLEM_BASE

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

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id.encode())]
            await send(message)

        if "\x00" in scope.get("path", "") or b"%00" in scope.get("query_string", b""):
            # No path or query parameter of this API takes one, and PostgreSQL refuses them in text.
            await _problem(send_with_id, scope, 400, "bad-request", "Bad request", "The URL holds a NUL byte (%00).")
            return
        if scope["method"] in ("POST", "PUT", "PATCH"):
            length = _header(scope, b"content-length")
            chunked = _header(scope, b"transfer-encoding") is not None
            has_body = chunked or (length is not None and length.strip() not in ("", "0"))
            if length is not None and length.strip().isdigit() and int(length) > self.max_body_bytes:
                await _problem(
                    send_with_id,
                    scope,
                    413,
                    "payload-too-large",
                    "Payload too large",
                    f"The body has {int(length)} bytes; at most {self.max_body_bytes} are accepted.",
                )
                return
            media = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
            v2 = scope.get("path", "").startswith("/v2/")  # JSON, or JSON + binary tensors (its own extension)
            if has_body and not _JSON_TYPE.match(media) and not v2:
                await _problem(
                    send_with_id,
                    scope,
                    415,
                    "unsupported-media-type",
                    "Unsupported media type",
                    f"Send the body as application/json (got {media or 'no Content-Type'}).",
                )
                return
            receive = _limited(receive, self.max_body_bytes)
        await self.app(scope, receive, send_with_id)


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
                raise _BodyTooLarge(limit)
        return message

    return wrapped


async def _problem(send: Send, scope: Scope, status: int, kind: str, title: str, detail: str) -> None:
    body: dict[str, Any] = {
        "type": PROBLEM_BASE + kind,
        "title": title,
        "status": status,
        "detail": detail,
        "instance": scope.get("path", ""),
        "request_id": scope.get("state", {}).get("request_id"),
    }
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
