"""Swagger UI at ``/docs`` and ReDoc at ``/redoc``, served by the service itself.

FastAPI's default pages load their JavaScript and CSS from a public CDN, so on an air-gapped cluster (or any
machine without internet) they are blank. The assets come from the ``fastapi-offline`` package (installed with the
service, never copied into this repository) and are served under ``/docs/assets/``; the pages name nothing outside
the service.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request
from starlette.responses import HTMLResponse

SWAGGER_UI = "/docs"
SWAGGER_UI_REDIRECT = "/docs/oauth2-redirect"
REDOC = "/redoc"
ASSETS = "/docs/assets"
PAGES = frozenset({SWAGGER_UI, SWAGGER_UI_REDIRECT, REDOC})


def install_docs(app: FastAPI) -> None:
    """Add the pages and their assets to an app built with ``docs_url=None, redoc_url=None``."""
    static = resources.files("fastapi_offline") / "static"
    app.mount(ASSETS, StaticFiles(directory=str(static)), name="docs-assets")

    @app.get(SWAGGER_UI, include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=f"{root}{SWAGGER_UI_REDIRECT}",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
            swagger_ui_parameters=app.swagger_ui_parameters,
        )

    @app.get(SWAGGER_UI_REDIRECT, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(REDOC, include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
