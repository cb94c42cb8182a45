"""FastAPI dependencies as ``Annotated`` aliases."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from app.core.auth import Caller
from app.core.errors import Unauthorized
from app.core.settings import Settings
from app.runtime import ServiceRuntime

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def get_runtime(request: Request) -> ServiceRuntime:
    return request.app.state.runtime


RuntimeDep = Annotated[ServiceRuntime, Depends(get_runtime)]


def get_settings(rt: RuntimeDep) -> Settings:
    return rt.settings


def get_session(request: Request, rt: RuntimeDep) -> Iterator[Session]:
    """The request's session; a GET's reads without a transaction of its own (``ServiceRuntime.reads``)."""
    factory = rt.reads if request.method in ("GET", "HEAD") and rt.reads is not None else rt.db
    with factory() as session:
        yield session


def get_spark(rt: RuntimeDep) -> Any:
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
