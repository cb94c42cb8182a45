"""The console's pages, its own scripts and styles (``/ui/static``) and the charting library (``/ui/vendor``).

The pages are shells rendered by Jinja2 with no data in them, so they need no API key: their scripts read the API
with the key the user entered once (kept in the browser's session storage, sent as ``Authorization``, never in a
URL), and draw everything with ``textContent`` (nothing from a request is ever parsed as HTML). The charts are
plotly.js, served from the installed ``plotly`` package (nothing is fetched from outside the service).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from functools import cache
from importlib import metadata
from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from app.core.errors import NotFound

HERE = Path(__file__).resolve().parent
STATIC = "/ui/static"
PLOTLY = "/ui/vendor/plotly.min.js"
PAGES = {
    "jobs": "Jobs",
    "job": "Job",
    "compare": "Compare",
    "models": "Models",
    "cluster": "Cluster",
}
_templates = Jinja2Templates(directory=str(HERE / "templates"))
router = APIRouter(include_in_schema=False)


@cache
def plotly_js() -> Path:
    """plotly.min.js inside the installed ``plotly`` package, found without importing it."""
    spec = importlib.util.find_spec("plotly")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / "package_data" / "plotly.min.js"
        if path.is_file():
            return path
    raise NotFound("plotly.min.js is not installed: reinstall the service (the plotly package ships it).")


def _page(request: Request, page: str, **context: object) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    version = metadata.version("plotly")
    return _templates.TemplateResponse(
        request,
        f"{page}.html",
        {
            "page": page,
            "title": PAGES[page],
            "pages": PAGES,
            "root": root,
            "static": f"{root}{STATIC}",
            "plotly": f"{root}{PLOTLY}?v={version}",
            **context,
        },
        headers={"Cache-Control": "no-store"},
    )


@router.get("/ui")
def jobs_page(request: Request) -> HTMLResponse:
    return _page(request, "jobs")


@router.get("/ui/jobs/{job_id}")
def job_page(request: Request, job_id: str) -> HTMLResponse:
    return _page(request, "job", job_id=job_id)


@router.get("/ui/compare")
def compare_page(request: Request) -> HTMLResponse:
    return _page(request, "compare")


@router.get("/ui/models")
def models_page(request: Request) -> HTMLResponse:
    return _page(request, "models")


@router.get("/ui/cluster")
def cluster_page(request: Request) -> HTMLResponse:
    return _page(request, "cluster")


OTHER_SPELLINGS = {
    "/": "/ui",
    "/ui/": "/ui",
    "/ui/jobs": "/ui",
    "/ui/jobs/": "/ui",
    "/ui/compare/": "/ui/compare",
    "/ui/models/": "/ui/models",
    "/ui/cluster/": "/ui/cluster",
}
"""Paths a person types or bookmarks, and the console page each leads to. The API answers a trailing slash with a
404 that names the path (app/main.py says why); these redirect instead."""


def _redirect_to(page: str) -> Callable[[Request], RedirectResponse]:
    def redirect(request: Request) -> RedirectResponse:  # the query (the page's filters) comes along
        query = request.url.query
        return RedirectResponse(
            f"{request.scope.get('root_path', '')}{page}{'?' + query if query else ''}", status_code=307
        )

    return redirect


for _spelling, _page_path in OTHER_SPELLINGS.items():
    router.add_api_route(_spelling, _redirect_to(_page_path), methods=["GET"], response_class=RedirectResponse)


@router.get("/ui/jobs/{job_id}/", response_class=RedirectResponse)
def job_page_with_a_slash(request: Request, job_id: str) -> RedirectResponse:
    """A job's page with a trailing slash (it was a 404, unlike every other page's)."""
    return _redirect_to(f"/ui/jobs/{quote(job_id, safe='')}")(request)


@router.get(PLOTLY)
def plotly_asset() -> FileResponse:
    return FileResponse(
        plotly_js(), media_type="text/javascript", headers={"Cache-Control": "public, max-age=86400, immutable"}
    )


def install_console(app: FastAPI) -> None:
    app.include_router(router)
    app.mount(STATIC, StaticFiles(directory=str(HERE / "static")), name="console-static")
