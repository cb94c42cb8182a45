"""FastAPI dependencies as ``Annotated`` aliases.

Every one is ``async``: FastAPI runs a plain ``def`` dependency in its thread pool, and under load each such hop
waits for a free thread and for the GIL (``bench.load``). None of them blocks: the session is opened without a
connection (the endpoint's first query, in the endpoint's thread, checks one out), and only a write request's
close, which may have a transaction to roll back, goes to a thread."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from app.core.auth import Caller
from app.core.errors import Unauthorized
from app.core.settings import Settings
from app.runtime import ServiceRuntime

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


async def get_runtime(request: Request) -> ServiceRuntime:
    return request.app.state.runtime


RuntimeDep = Annotated[ServiceRuntime, Depends(get_runtime)]


async def get_settings(rt: RuntimeDep) -> Settings:
    return rt.settings


async def get_session(request: Request, rt: RuntimeDep) -> AsyncIterator[Session]:
    """The request's session; a GET's reads without a transaction of its own (``ServiceRuntime.reads``). A read's
    session is closed here (returning its connection to the pool does no I/O); a write's in a thread, since it may
    roll back."""
    reading = request.method in ("GET", "HEAD")
    session = (rt.read_sessions if reading else rt.db)()
    try:
        yield session
    finally:
        if reading:
            session.close()
        else:
            await run_in_threadpool(session.close)


async def get_spark(rt: RuntimeDep) -> Any:
    return rt.spark


async def get_caller(request: Request) -> Caller:
    """The caller ``RequestGuard`` identified from the API key (the anonymous admin without configured keys)."""
    caller = getattr(request.state, "caller", None)
    if not isinstance(caller, Caller):  # a public path, or an app without the guard: refuse rather than guess
        raise Unauthorized(
            "This endpoint needs an API key: send the header 'Authorization: Bearer <key>'.",
            headers={"WWW-Authenticate": 'Bearer realm="sparktrain"'},
        )
    return caller


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
SparkDep = Annotated["SparkSession", Depends(get_spark)]
CallerDep = Annotated[Caller, Depends(get_caller)]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=200,
        description="Same key and body return the same job; the same key with another body is a 409.",
    ),
]
