"""Idempotency-Key replays over real HTTP, on SQLite and PostgreSQL: the same key and body return the first job
(202, the same Location) whatever the server resolved or wrote since (a default output path, an output now written,
an alias moved, a newer version); the same key with another body is a 409.

The key is checked against the body as posted, not as the server rewrote it for the job."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import pytest

from tests.helpers import Service, pg_database, running_service

MODEL = "replay-model"
ROWS = "x1,x2,y,id\n" + "".join(f"{i % 7},{(i * 3) % 5},{2 * (i % 7) + (i * 3) % 5 + 0.5},{i}\n" for i in range(40))
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
TRAIN = {
    "name": MODEL,
    "framework": "spark_ml",
    "dataset": {"uri": "rows.csv", "features": ["x1", "x2"], "label": "y", "task": "regression"},
    "params": {"algorithm": "linear_regression"},
}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def svc(request: pytest.FixtureRequest, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The service with two versions of MODEL; the first was trained with ``Idempotency-Key: train-1``."""
    base = tmp_path_factory.mktemp("replays")
    data = base / "data"
    data.mkdir()
    (data / "rows.csv").write_text(ROWS)
    database = (
        nullcontext(f"sqlite:///{base / 'replays.db'}")
        if request.param == "sqlite"
        else pg_database(request.getfixturevalue("pg_server"))
    )
    with database as db_url, running_service(spark, base, database_url=db_url, data_roots=[data]) as service:
        _done(service, service.client.post("/train", json=TRAIN, headers={"Idempotency-Key": "train-1"}))
        _done(service, service.client.post("/train", json=TRAIN))
        yield service


def _done(svc: Service, response: Any) -> dict[str, Any]:
    assert response.status_code == 202, response.text
    job = svc.wait(response.json()["id"], TERMINAL)
    assert job["status"] == "SUCCEEDED", job["error"]
    return job


def _post(svc: Service, path: str, body: dict[str, Any], key: str) -> Any:
    return svc.client.post(path, json=body, headers={"Idempotency-Key": key})


def _same_job(first: Any, again: Any) -> None:
    assert first.status_code == 202, first.text
    assert again.status_code == 202, again.text
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["location"] == first.headers["location"] == f"/jobs/{first.json()['id']}"


def _conflict(response: Any) -> None:
    assert response.status_code == 409, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "Idempotency-Key" in response.json()["detail"]


def _latest_version(svc: Service) -> int:
    return int(svc.client.get("/jobs", params={"type": "train", "limit": 1}).json()["items"][0]["model"]["version"])


def test_a_batch_prediction_with_the_default_output_replays(svc: Service) -> None:
    body = {"model": {"name": MODEL}, "dataset": {"uri": "rows.csv", "key": "id"}}
    first = _post(svc, "/predict", body, "bp-1")
    _same_job(first, _post(svc, "/predict", body, "bp-1"))
    # the same body written out in full (a default given, a null left in) is the same body
    _same_job(first, _post(svc, "/predict", {**body, "batch_size": 1024, "output_uri": None}, "bp-1"))
    _conflict(_post(svc, "/predict", {**body, "batch_size": 7}, "bp-1"))
    _done(svc, first)


def test_a_batch_prediction_replays_after_it_wrote_its_output(svc: Service) -> None:
    body = {
        "model": {"name": MODEL},
        "dataset": {"uri": "rows.csv", "key": "id"},
        "output_uri": f"out-{uuid.uuid4().hex}",
    }
    first = _post(svc, "/predict", body, "bp-2")
    _done(svc, first)
    _same_job(first, _post(svc, "/predict", body, "bp-2"))
    _conflict(_post(svc, "/predict", {**body, "batch_size": 7}, "bp-2"))
    # without the key the path is taken: the replay above was not just a lucky new job
    assert svc.client.post("/predict", json=body).status_code == 422


def test_an_evaluation_by_alias_replays_after_the_alias_moved(svc: Service) -> None:
    assert svc.client.put(f"/models/{MODEL}/aliases/best", json={"version": 1}).status_code == 200
    body = {"model": {"name": MODEL, "alias": "best"}, "dataset": {"uri": "rows.csv"}}
    first = _post(svc, "/evaluate", body, "ev-alias")
    assert first.json()["request"]["model"] == {"name": MODEL, "version": 1}
    assert svc.client.put(f"/models/{MODEL}/aliases/best", json={"version": 2}).status_code == 200
    _same_job(first, _post(svc, "/evaluate", body, "ev-alias"))
    _conflict(_post(svc, "/evaluate", {**body, "metrics": ["regression"], "batch_size": 8}, "ev-alias"))
    _done(svc, first)


def test_an_evaluation_of_the_newest_version_replays_after_a_newer_one(svc: Service) -> None:
    body = {"model": {"name": MODEL}, "dataset": {"uri": "rows.csv"}}
    first = _post(svc, "/evaluate", body, "ev-newest")
    newest = _latest_version(svc)
    assert first.json()["request"]["model"] == {"name": MODEL, "version": newest}
    _done(svc, svc.client.post("/train", json=TRAIN))
    assert _latest_version(svc) == newest + 1
    _same_job(first, _post(svc, "/evaluate", body, "ev-newest"))
    _done(svc, first)


def test_a_training_replays_after_it_finished(svc: Service) -> None:
    first = svc.client.get("/jobs", params={"type": "train", "limit": 100}).json()["items"][-1]
    again = _post(svc, "/train", TRAIN, "train-1")
    assert again.status_code == 202, again.text
    assert again.json()["id"] == first["id"] and again.headers["location"] == f"/jobs/{first['id']}"
    _conflict(_post(svc, "/train", {**TRAIN, "name": "another-model"}, "train-1"))
