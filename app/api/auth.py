"""Who may call what: every endpoint needs an API key when keys are configured, except the health checks and the
documentation (so that Swagger UI loads and offers its "Authorize" button).

Authentication is enforced once, in :class:`app.api.middleware.RequestGuard`, before the route is even looked up:
a new route is protected without anyone remembering to. The route reads the caller with ``CallerDep``.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.types import Scope

from app.api import docs
from app.core.auth import ANONYMOUS, Caller, KeyRing
from app.core.errors import ServiceUnavailable

log = logging.getLogger("sparktrain.api.auth")

HEALTH_PATHS = frozenset({"/healthz", "/readyz", "/v2/health/live", "/v2/health/ready"})
METRICS = "/metrics"
CONSOLE = "/ui"
"""The web console's pages and assets are public: they hold no data. Their scripts ask for a key, keep it in the
browser's session storage and send it as ``Authorization`` on every API call (app/ui)."""
SCHEME = "bearerAuth"


def public_paths(app: Any, *, metrics: bool = False) -> frozenset[str]:
    """The paths anyone may call: health checks, the OpenAPI document and the pages that show it (their assets,
    under ``docs.ASSETS``, too), the console's pages and ``/`` (a redirect to them), and ``/metrics`` with
    SPARKTRAIN_METRICS_PUBLIC."""
    paths = HEALTH_PATHS | docs.PAGES | {CONSOLE, "/"} | ({app.openapi_url} if app.openapi_url else set())
    return paths | {METRICS} if metrics else paths


def install_keyring(app: Any, keyring: KeyRing, *, public_metrics: bool = False) -> None:
    """Called at start-up, once the settings are known; until then every request but the public ones is refused."""
    app.state.public_paths = public_paths(app, metrics=public_metrics)
    app.state.keyring = keyring


def identify(scope: Scope, authorization: str | None) -> Caller | None:
    """The caller of an HTTP request; None on a public path. Raises Unauthorized (401) for a missing, malformed
    or unknown key, and ServiceUnavailable before the service has started (no keys loaded yet: fail closed)."""
    app = scope.get("app")
    if app is None:
        raise ServiceUnavailable("The service has not started yet; try again in a moment.")
    public = getattr(app.state, "public_paths", None) or public_paths(app)
    path = scope.get("path", "")
    if path in public or path.startswith((f"{docs.ASSETS}/", f"{CONSOLE}/")):
        return None
    keyring: KeyRing | None = getattr(app.state, "keyring", None)
    if keyring is None:
        raise ServiceUnavailable("The service has not started yet; try again in a moment.")
    if not keyring.enabled:
        return ANONYMOUS
    try:
        return keyring.identify(authorization)
    except Exception:
        client = scope.get("client") or ("?", 0)
        log.warning("refused %s %s from %s: no valid API key", scope.get("method"), scope.get("path"), client[0])
        raise


def document_security(schema: dict[str, Any], *, public: frozenset[str], required: bool) -> dict[str, Any]:
    """Declare the bearer scheme (Swagger UI's "Authorize" button) and which operations need it. Without configured
    keys the key is optional (``{}`` is an allowed alternative)."""
    schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
    schemes[SCHEME] = {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key from SPARKTRAIN_API_KEYS, sent as 'Authorization: Bearer <key>'. Without "
        "configured keys the service needs none.",
    }
    requirement: list[dict[str, list[str]]] = [{SCHEME: []}] if required else [{SCHEME: []}, {}]
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            if not isinstance(operation, dict) or method not in _METHODS:
                continue
            if path in public:
                operation["security"] = []
                continue
            operation["security"] = requirement
            operation.setdefault("responses", {}).setdefault(
                "401",
                {
                    "description": "No valid API key (`Authorization: Bearer <key>`); `WWW-Authenticate` says why.",
                    "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
                },
            )
    return schema


_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
