"""Requests per second per API key (the owner's ``requests_per_s`` quota): a token bucket per key, shared by every
driver (app/services/quotas.py). A request over it is answered 429 problem+json naming the quota, with
``Retry-After``. Pure ASGI middleware that runs after :class:`app.api.middleware.RequestGuard` identified the
caller; public paths (health checks, the docs) are never limited. When the bucket's store does not answer (Redis or
the database away), requests pass: the limit protects the service, it must not take it down.
"""

from __future__ import annotations

import logging
import math

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import problem_response
from app.core.auth import Caller
from app.core.errors import TooManyRequests
from app.services.quotas import RequestLimiter, limits_for

log = logging.getLogger("sparktrain.api")


class RateLimit:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        caller = scope.get("state", {}).get("caller") if scope["type"] == "http" else None
        runtime = getattr(scope["app"].state, "runtime", None) if isinstance(caller, Caller) else None
        limiter: RequestLimiter | None = getattr(runtime, "limiter", None)
        if runtime is None or limiter is None or not isinstance(caller, Caller):
            await self.app(scope, receive, send)
            return
        rate = limits_for(settings=runtime.settings, owner=caller.owner).requests_per_s
        if rate:
            authorization = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
            try:
                wait = await run_in_threadpool(limiter.take, RequestLimiter.bucket(authorization), rate)
            except Exception as exc:
                log.warning("the request limiter failed (%s: %s); letting the request pass", type(exc).__name__, exc)
                wait = 0.0
            if wait > 0:
                error = TooManyRequests(
                    f"This API key may make {rate} request{'' if rate == 1 else 's'} a second (quota "
                    f"requests_per_s of {caller.owner!r}); "
                    f"try again in {wait:.2f} s.",
                    headers={"Retry-After": str(max(1, math.ceil(wait)))},
                    quota="requests_per_s",
                    limit=rate,
                )
                response = problem_response(error.problem(), Request(scope), headers=error.headers)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
