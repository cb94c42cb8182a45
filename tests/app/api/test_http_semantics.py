"""HTTP semantics over real HTTP (app/api/http_semantics.py, app/api/errors.py): HEAD wherever GET, query parameters
checked as strictly as bodies, and a trailing slash that is a 404 naming the path instead of a 307."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Annotated, Any

import anyio
import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, Query
from pydantic import BaseModel

from app.api.errors import install_error_handlers
from app.api.http_semantics import HttpSemantics
from app.db.session import transaction
from app.services import models
from tests.helpers import Service, running_service, taxi_request


@pytest.fixture(scope="module")
def quiet(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A service without a job consumer: its jobs stay QUEUED, so their event streams stay open."""
    with running_service(spark, tmp_path_factory.mktemp("http"), in_process_consumer=False) as svc:
        yield svc


@pytest.fixture(scope="module")
def job_id(quiet: Service) -> str:
    return str(quiet.train(taxi_request("semantics"))["id"])


@pytest.fixture(scope="module")
def model(quiet: Service, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A registered version whose artifact is a directory of one file."""
    directory = tmp_path_factory.mktemp("artifact")
    (directory / "model.bin").write_bytes(b"\x01" * 4096)
    with transaction(quiet.runtime.db) as s:
        models.register_version(
            session=s, name="headed", framework="spark_ml", artifact_uri=directory.as_uri(), metrics={}, params={},
            job_id=None,
        )  # fmt: skip
    return "headed"


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return dict(response.json())


def _allow(response: httpx.Response) -> set[str]:
    return {m.strip() for m in response.headers["allow"].split(",")}


# --- HEAD ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    ["/jobs", "/jobs?limit=1", "/jobs/{job}", "/jobs/nope", "/jobs/{job}/metrics", "/jobs/{job}/logs", "/models",
     "/models/headed/versions/1", "/healthz", "/docs", "/redoc", "/openapi.json", "/ui", "/ui/compare?ids=x"],
)  # fmt: skip
def test_head_answers_as_get_without_a_body(quiet: Service, job_id: str, model: str, path: str) -> None:
    url = path.format(job=job_id)
    get, head = quiet.client.get(url), quiet.client.head(url)
    assert head.status_code == get.status_code, head.headers
    assert head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]
    assert head.headers["content-length"] == get.headers["content-length"] == str(len(get.content))
    assert head.headers.get("x-request-id")


def test_every_documented_get_answers_head(quiet: Service) -> None:
    paths = quiet.client.get("/openapi.json").json()["paths"]
    plain = [p for p, item in paths.items() if "get" in item and "{" not in p]
    assert {"/jobs", "/models", "/healthz", "/readyz", "/metrics", "/v2/health/live"} <= set(plain)
    for path in plain:
        get, head = quiet.client.get(path), quiet.client.head(path)
        assert (head.status_code, head.content) == (get.status_code, b""), path
        assert head.headers.get("content-type") == get.headers.get("content-type"), path


@pytest.mark.parametrize("path", ["/jobs/{job}/events", "/jobs/{job}/logs?follow=true"])
def test_head_of_an_event_stream_ends_at_once_and_leaves_nothing_open(quiet: Service, job_id: str, path: str) -> None:
    started = time.monotonic()
    head = quiet.client.head(path.format(job=job_id), timeout=10)
    assert time.monotonic() - started < 5
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-type"].startswith("text/event-stream")
    assert quiet.client.get("/healthz").status_code == 200  # the same connection serves the next request
    hub = quiet.app.state.events
    deadline = time.monotonic() + 10
    while hub.clients and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hub.clients == 0, "the stream behind the HEAD still runs"


def test_head_of_an_artifact_download(quiet: Service, model: str) -> None:
    url = f"/models/{model}/versions/1/artifact"
    get, head = quiet.client.get(url), quiet.client.head(url)
    assert get.status_code == head.status_code == 200
    assert len(get.content) > 0 and head.content == b""
    for name in ("content-type", "content-disposition"):
        assert head.headers[name] == get.headers[name]


def test_allow_tells_the_truth(quiet: Service) -> None:
    response = quiet.client.post("/jobs")
    _problem(response, 405)
    assert _allow(response) == {"GET", "HEAD"}
    for method in ("HEAD", "GET"):  # HEAD is answered where GET is, and nowhere else
        response = quiet.client.request(method, "/train")
        assert response.status_code == 405 and _allow(response) == {"POST"}
    response = quiet.client.options("/jobs")  # OPTIONS is not answered, and Allow does not claim it
    _problem(response, 405)
    assert _allow(response) == {"GET", "HEAD"}


# --- query parameters ----------------------------------------------------------------------------------------


def test_an_unknown_query_parameter_is_named_with_those_the_endpoint_takes(quiet: Service, job_id: str) -> None:
    problem = _problem(quiet.client.get("/jobs", params={"state": "FAILED"}), 422)
    assert [(e["loc"], e["in"], e["type"]) for e in problem["errors"]] == [("state", "query", "extra_forbidden")]
    for name in ("status", "type", "limit", "cursor"):
        assert name in problem["errors"][0]["msg"], problem
    assert problem["detail"].startswith("state: unknown query parameter"), problem
    problem = _problem(quiet.client.get(f"/jobs/{job_id}", params={"verbose": "1"}), 422)
    assert "takes none" in problem["detail"], problem
    problem = _problem(quiet.client.post("/train?dry_run=1", json=taxi_request("never")), 422)
    assert problem["errors"][0]["loc"] == "dry_run", problem
    assert quiet.client.head("/jobs?state=FAILED").status_code == 422


def test_a_repeated_single_valued_query_parameter(quiet: Service, job_id: str) -> None:
    problem = _problem(quiet.client.get("/jobs?status=RUNNING&status=QUEUED"), 422)
    assert [(e["loc"], e["in"], e["type"]) for e in problem["errors"]] == [("status", "query", "multiple_values")]
    problem = _problem(quiet.client.get(f"/jobs/{job_id}/metrics?key=a&key=b&since=3"), 422)
    assert {(e["loc"], e["type"]) for e in problem["errors"]} == {
        ("key", "multiple_values"),
        ("since", "extra_forbidden"),
    }
    assert problem["detail"].endswith("(and 1 more)"), problem


def test_every_documented_query_parameter_is_accepted(quiet: Service) -> None:
    """Taken from the routes themselves: a parameter added to a route needs nothing else."""
    paths = quiet.client.get("/openapi.json").json()["paths"]
    checked = 0
    for template, item in paths.items():
        for method, operation in item.items():
            names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
            if not names or method not in ("get", "head"):
                continue
            url = template.replace("{", "").replace("}", "")
            response = quiet.client.request(method, url, params=dict.fromkeys(names, "1"))
            if response.status_code == 422:
                types = {e["type"] for e in response.json()["errors"]}
                assert not types & {"extra_forbidden", "multiple_values"}, (template, response.json())
            checked += 1
    assert checked >= 5


def test_pages_outside_the_api_keep_their_own_query(quiet: Service) -> None:
    for url in ["/docs?x=1", "/redoc?y=2", "/openapi.json?z", "/ui?ids=a", "/ui/compare?ids=a,b"]:
        assert quiet.client.get(url).status_code == 200, url


class _Window(BaseModel):
    start: int = 0
    stop: int | None = None


async def _paging(page: int = 1) -> int:
    return page


_router = APIRouter(prefix="/p")


@_router.get("/things")
async def _things(
    tags: Annotated[list[str] | None, Query()] = None, page: Annotated[int, Depends(_paging)] = 1
) -> dict[str, Any]:
    return {"tags": tags, "page": page}


@_router.get("/window")
async def _window(w: Annotated[_Window, Query()]) -> dict[str, Any]:
    return w.model_dump()


def test_list_parameters_sub_dependencies_and_query_models() -> None:
    """Kinds of parameters this service has none of yet: a list may repeat; a sub-dependency's and a query model's
    parameters are the operation's."""
    app = FastAPI()
    app.include_router(_router)
    install_error_handlers(app)
    app.add_middleware(HttpSemantics)
    urls = ["/p/things?tags=a&tags=b&page=2", "/p/things?page=1&page=2", "/p/window?start=1&stop=2", "/p/window?x"]

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return [await client.get(url) for url in urls]

    listed, twice, model, unknown = anyio.run(run)
    assert listed.json() == {"tags": ["a", "b"], "page": 2}
    assert _problem(twice, 422)["errors"][0]["loc"] == "page"
    assert model.json() == {"start": 1, "stop": 2}
    assert "takes start, stop" in _problem(unknown, 422)["detail"]


# --- trailing slashes ----------------------------------------------------------------------------------------


def test_a_trailing_slash_is_a_404_naming_the_path(quiet: Service, job_id: str) -> None:
    before = len(quiet.client.get("/jobs").json()["items"])
    for method, url, right in [
        ("GET", "/jobs/", "/jobs"),
        ("GET", f"/jobs/{job_id}/", f"/jobs/{job_id}"),
        ("POST", "/train/", "/train"),
        ("GET", "/healthz//", "/healthz"),
    ]:
        body = taxi_request("slash") if method == "POST" else None
        response = quiet.client.request(method, url, json=body)
        assert "location" not in response.headers
        problem = _problem(response, 404)
        assert f"the path is {right}, without the trailing slash" in problem["detail"], problem
    assert len(quiet.client.get("/jobs").json()["items"]) == before  # the POST was not served elsewhere
    assert "see /docs" in _problem(quiet.client.get("/no/such/"), 404)["detail"]
    assert quiet.client.get("/docs/assets/swagger-ui.css").status_code == 200


def test_head_of_a_path_with_a_trailing_slash(quiet: Service) -> None:
    assert quiet.client.head("/jobs/").status_code == 404
