"""The FastAPI application: ``create_app`` builds it; its lifespan starts and stops the driver's runtime."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool

from app.api.auth import install_keyring
from app.api.docs import install_docs
from app.api.errors import install_error_handlers
from app.api.event_hub import EventHub
from app.api.http_semantics import HttpSemantics, prepare_routes
from app.api.middleware import RequestGuard
from app.api.openapi import install_openapi, operation_id
from app.api.ratelimit import RateLimit
from app.api.routes import (
    checkpoints,
    datasets,
    events,
    inference,
    jobs,
    metrics,
    models,
    owners,
    recipes,
    service,
    train,
    tune,
    v2,
)
from app.api.telemetry import HttpMetrics, Telemetry
from app.core.auth import KeyRing
from app.core.heap import HeapKeeper
from app.core.settings import Settings, load_settings
from app.ui import install_console

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DESCRIPTION = """
sparktrain is a Spark driver with a REST API: it trains, evaluates and serves models whose work runs on Spark
executors. Jobs are queued (`202` + `Location`) and tracked in the database; poll `GET /jobs/{id}`.

Errors are [RFC 9457](https://www.rfc-editor.org/rfc/rfc9457) `application/problem+json`.

When the service runs with API keys (`SPARKTRAIN_API_KEYS`), every endpoint but the health checks needs
`Authorization: Bearer <key>` (**Authorize** above), and a key sees only its owner's jobs, models and datasets.
"""

MAX_BODY_BYTES = 8 * 1024 * 1024


def create_app(settings: Settings | None = None, *, spark: SparkSession | None = None) -> FastAPI:
    """Build the app. Settings are read when the app starts if not given; ``spark`` shares an existing
    SparkSession (tests) instead of building one."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from app.runtime import start_runtime

        prepare_routes(app)
        resolved = settings or load_settings()
        logging.getLogger("sparktrain").setLevel(resolved.log_level)
        install_keyring(app, KeyRing(resolved.api_keys), public_metrics=resolved.metrics_public)
        app.state.runtime = await run_in_threadpool(start_runtime, resolved, spark=spark)
        # What is built so far, and the libraries the first jobs import, live as long as the process: kept out of
        # the collector's full passes, which otherwise stall every request (app/core/heap.py).
        heap = HeapKeeper()
        heap.start()
        try:
            yield
        finally:
            heap.stop()
            await app.state.events.close()
            await app.state.runtime.close_loop_reads()
            await run_in_threadpool(app.state.runtime.close)  # after a stop signal the jobs were handed back already

    app = FastAPI(
        title="sparktrain",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served from local assets instead of a CDN: app/api/docs.py
        redoc_url=None,
        # A trailing slash is a 404 that names the path without it (app/api/errors.py), not Starlette's 307: a
        # redirect is invisible to a client that does not follow it (curl without -L saw an empty 307), makes a client
        # that does re-send a POST's body (or turn it into a GET), and serving both spellings would give each resource
        # two URLs, which relative links, caches, public paths and the metrics' route labels would all tell apart.
        redirect_slashes=False,
        generate_unique_id_function=operation_id,  # operationIds a generated client can name its functions after
    )
    app.add_middleware(HttpSemantics)  # innermost: HEAD as GET, strict query parameters (after the guard's 401)
    app.add_middleware(RateLimit)  # inside the guard: it needs the caller the guard identified
    app.add_middleware(RequestGuard, max_body_bytes=MAX_BODY_BYTES)
    app.state.telemetry = Telemetry()
    app.state.telemetry.install(lambda: app)
    app.add_middleware(HttpMetrics, telemetry=app.state.telemetry)  # outermost: it times the guard too
    app.state.events = EventHub(lambda: app.state.runtime)
    install_error_handlers(app)
    install_openapi(app)
    install_docs(app)
    routers = (train, tune, inference, recipes, jobs, events, checkpoints, models, datasets, owners, service, metrics,
               v2)  # fmt: skip
    for module in routers:
        app.include_router(module.router)
    install_console(app)
    return app
