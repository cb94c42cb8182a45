"""``GET /metrics``: Prometheus' text format (app/api/telemetry.py says what is in it)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.api.deps import RuntimeDep
from app.core.auth import Caller
from app.core.errors import Forbidden

router = APIRouter(tags=["service"])


@router.get(
    "/metrics",
    summary="Prometheus metrics: HTTP, jobs, queue, online predict, model cache, executors, running torch jobs",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
)
def metrics(request: Request, rt: RuntimeDep) -> Response:
    caller = getattr(request.state, "caller", None)
    if not rt.settings.metrics_public and isinstance(caller, Caller) and not caller.admin:
        raise Forbidden("GET /metrics needs an admin's API key (or SPARKTRAIN_METRICS_PUBLIC=true).")
    return Response(generate_latest(request.app.state.telemetry.registry), media_type=CONTENT_TYPE_LATEST)
