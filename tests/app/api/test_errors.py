"""Bad input gets a clear 4xx as problem+json, and nothing is written."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers import Service, taxi_request

RF = {"algorithm": "random_forest", "numTrees": 5}


def _job_count(service: Service) -> int:
    return len(service.client.get("/jobs", params={"limit": 500}).json()["items"])


def _problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = dict(response.json())
    assert {"type", "title", "status", "detail"} <= set(body)
    assert body["status"] == status
    assert response.headers.get("x-request-id")
    return body


def _with(path: str, value: Any) -> dict[str, Any]:
    body = taxi_request(**RF)
    node: Any = body
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return body


_DELETE = object()


@pytest.mark.parametrize(
    ("body", "loc", "words"),
    [
        (_with("framework", "caffe"), "framework", "Input should be"),
        (_with("params.algorithm", "gbt"), "params.algorithm", "unknown algorithm"),
        (_with("dataset.label", "tip_amount"), "dataset.label", "no column 'tip_amount'"),
        (_with("dataset.label", _DELETE), "dataset.label", "required"),
        (_with("dataset.uri", "taxi/missing.parquet"), "dataset.uri", "does not exist"),
        (_with("dataset.uri", "../../etc/passwd"), "dataset.uri", "outside the configured data roots"),
        (_with("dataset.uri", "/etc/passwd"), "dataset.uri", "outside the configured data roots"),
        (_with("dataset.features", ["trip_distance", "fare_amount"]), "dataset.features[1]", "is the label"),
        (_with("dataset.features", ["trip_distnce"]), "dataset.features[0]", "no column 'trip_distnce'"),
        (_with("params.grid", {"maxDepht": [2, 7]}), "params.grid.maxDepht", "unknown parameter"),
        (_with("params.grid", {"maxDepth": [2, -7]}), "params.grid.maxDepth", "between 0 and 30"),
        (_with("training", {"epochs": -1}), "training.epochs", "greater than or equal to 1"),
        (_with("name", "no spaces/allowed"), "name", "pattern"),
        (_with("dataset.surprise", 1), "dataset.surprise", "Extra inputs"),
        (_with("validation", {"uri": "../secrets.parquet"}), "validation.uri", "outside"),
    ],
)
def test_bad_train_requests(service: Service, body: dict[str, Any], loc: str, words: str) -> None:
    before = _job_count(service)
    problem = _problem(service.client.post("/train", json=body), 422)
    assert any(e["loc"] == loc for e in problem["errors"]), problem
    assert words in problem["detail"] or any(words in e["msg"] for e in problem["errors"]), problem
    assert _job_count(service) == before


def test_another_familys_params_are_named(service: Service) -> None:
    body = copy.deepcopy(taxi_request(**RF))
    body["framework"] = "xgboost"
    problem = _problem(service.client.post("/train", json=body), 422)
    assert "unknown xgboost parameter" in problem["detail"] and "'algorithm'" in problem["detail"], problem


def test_non_json_body(service: Service) -> None:
    before = _job_count(service)
    response = service.client.post("/train", content=b"{not json", headers={"content-type": "application/json"})
    assert "not valid JSON" in _problem(response, 400)["detail"]
    assert _job_count(service) == before


def test_wrong_content_type(service: Service) -> None:
    response = service.client.post("/train", content=b"name=x", headers={"content-type": "text/plain"})
    assert "application/json" in _problem(response, 415)["detail"]


def test_body_too_large(service: Service) -> None:
    response = service.client.post(
        "/train", content=b"[" + b"0," * (5 * 1024 * 1024) + b"0]", headers={"content-type": "application/json"}
    )
    _problem(response, 413)


def test_not_found_everywhere(service: Service) -> None:
    assert "No job" in _problem(service.client.get("/jobs/nope"), 404)["detail"]
    assert "No job" in _problem(service.client.get("/jobs/nope/metrics"), 404)["detail"]
    assert "No job" in _problem(service.client.get("/jobs/nope/logs"), 404)["detail"]
    assert "No job" in _problem(service.client.post("/jobs/nope/cancel"), 404)["detail"]
    assert "No model" in _problem(service.client.get("/models/nope/versions/1"), 404)["detail"]
    assert "/docs" in _problem(service.client.get("/no/such/path"), 404)["detail"]
    _problem(service.client.delete("/train"), 405)
    _problem(service.client.get("/jobs", params={"limit": 0}), 422)
    _problem(service.client.get("/jobs", params={"cursor": "garbage!"}), 400)
    _problem(service.client.get("/models/x/versions/0"), 422)


def test_request_id_is_echoed(service: Service) -> None:
    response = service.client.get("/jobs/nope", headers={"x-request-id": "abc-123"})
    assert response.headers["x-request-id"] == "abc-123"
    assert response.json()["request_id"] == "abc-123"
