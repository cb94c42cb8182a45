"""Batch prediction outputs are private to their owner, over real HTTP on SQLite and PostgreSQL.

alice writes two batch predictions into the data roots (one at her own ``output_uri``, one at the default place).
bob (another key) names them as datasets in every way a body can: each answers exactly as a path that does not
exist, a directory that holds one is refused, and no new output may be written inside one. alice and an admin read
them (docs/security.md, "Owners")."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.helpers import LINEAR_ROWS as ROWS
from tests.helpers import linear_train_body as _train
from tests.helpers import pg_database, running_service
from tests.helpers import problem as _problem

ALICE_KEY = "alice-0123456789abcdef"
BOB_KEY = "bob-0123456789abcdef00"
ROOT_KEY = "root-0123456789abcdef0"
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


def _finished(svc: Any, response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 202, response.text
    job = svc.wait(response.json()["id"], TERMINAL)
    assert job["status"] == "SUCCEEDED", job["error"]
    return job


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request: pytest.FixtureRequest, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    base = tmp_path_factory.mktemp("outputs")
    data = base / "data"
    data.mkdir()
    (data / "rows.csv").write_text(ROWS)
    if request.param == "sqlite":
        from contextlib import nullcontext

        database: Any = nullcontext(f"sqlite:///{base / 'outputs.db'}")
    else:
        database = pg_database(request.getfixturevalue("pg_server"))
    keys = f"{ALICE_KEY}:alice, {BOB_KEY}:bob, {ROOT_KEY}:root:admin"
    with database as db_url, running_service(spark, base, database_url=db_url, data_roots=[data], api_keys=keys) as svc:
        clients = {k: httpx.Client(base_url=svc.url, headers={"Authorization": f"Bearer {v}"}, timeout=60)
                   for k, v in (("alice", ALICE_KEY), ("bob", BOB_KEY), ("root", ROOT_KEY))}  # fmt: skip
        svc.client.headers["Authorization"] = f"Bearer {ROOT_KEY}"
        alice, bob = clients["alice"], clients["bob"]
        _finished(svc, alice.post("/train", json=_train("alice-model")))
        _finished(svc, bob.post("/train", json=_train("bob-model")))
        batch = {"model": {"name": "alice-model"}, "dataset": {"uri": "rows.csv", "key": "id"}}
        mine = _finished(svc, alice.post("/predict", json={**batch, "output_uri": "alice-out"}))
        default = _finished(svc, alice.post("/predict", json=batch))
        try:
            yield {"svc": svc, **clients, "data": data, "job": mine, "default": default["request"]["output_uri"]}
        finally:
            for client in clients.values():
                client.close()


def _unknown_answer(response: httpx.Response, nothing: httpx.Response, known: str, unknown: str) -> None:
    """bob's request naming alice's output got exactly what the same request naming no file gets."""
    a, b = _problem(response, 422), _problem(nothing, 422)
    assert a["errors"][0]["loc"] == b["errors"][0]["loc"], (a, b)
    assert a["detail"].replace(known, "?") == b["detail"].replace(unknown, "?"), (a, b)
    assert "does not exist in the data roots" in a["detail"], a


def test_another_owners_output_answers_as_a_path_that_does_not_exist(world: dict[str, Any]) -> None:
    bob: httpx.Client = world["bob"]
    part = next(p for p in (world["data"] / "alice-out").iterdir() if p.name.startswith("part-"))
    default = world["default"]
    for known in (
        "alice-out",
        str(world["data"] / "alice-out"),
        f"alice-out/{part.name}",
        default,
        f"file://{default}",
    ):
        unknown = "no-such-output"
        requests = (
            ("/datasets", lambda uri: {"uri": uri}),
            ("/train", lambda uri: _train("bob-model-2", uri)),
            ("/train", lambda uri: {**_train("bob-model-2"), "validation": {"uri": uri}}),
            ("/evaluate", lambda uri: {"model": {"name": "bob-model"}, "dataset": {"uri": uri}}),
            ("/predict", lambda uri: {"model": {"name": "bob-model"}, "dataset": {"uri": uri, "key": "id"}}),
        )
        for path, body in requests:
            _unknown_answer(bob.post(path, json=body(known)), bob.post(path, json=body(unknown)), known, unknown)
    assert not [j for j in bob.get("/jobs").json()["items"] if j["type"] != "train"]  # nothing was queued
    assert bob.get("/datasets").json()["items"] == []


def test_a_directory_holding_another_owners_output_is_refused(world: dict[str, Any]) -> None:
    bob: httpx.Client = world["bob"]
    for uri in ("predictions", str(world["data"])):
        problem = _problem(bob.post("/datasets", json={"uri": uri, "options": {"recursiveFileLookup": "true"}}), 422)
        assert "holds another owner's batch prediction output" in problem["detail"], problem
    # bob's own file beside them is his to read
    (world["data"] / "bob.csv").write_text(ROWS)
    assert bob.post("/datasets", json={"uri": "bob.csv"}).status_code == 201


def test_the_unfinished_output_is_hidden_too(world: dict[str, Any]) -> None:
    """The directory a prediction writes before its rename (``.<name>.partial-<job>-<attempt>``)."""
    partial = world["data"] / f".late.partial-{world['job']['id']}-1"
    shutil.copytree(world["data"] / "alice-out", partial)
    try:
        bob: httpx.Client = world["bob"]
        known, unknown = partial.name, "no-such-output"
        _unknown_answer(bob.post("/datasets", json={"uri": known}), bob.post("/datasets", json={"uri": unknown}),
                        known, unknown)  # fmt: skip
        assert world["alice"].post("/datasets", json={"uri": known}).status_code == 201
    finally:
        shutil.rmtree(partial)


def test_no_output_is_written_inside_an_output_or_where_one_is_queued(world: dict[str, Any]) -> None:
    body = {"model": {"name": "bob-model"}, "dataset": {"uri": "rows.csv", "key": "id"}}
    for client, model in ((world["bob"], "bob-model"), (world["alice"], "alice-model")):
        answer = client.post("/predict", json={**body, "model": {"name": model}, "output_uri": "alice-out/more"})
        assert "lies inside the output of a batch prediction" in _problem(answer, 422)["detail"]
    # a prediction that is queued but has not written yet: its path is taken until it ends
    from app.core.jobstates import JobStatus
    from app.db.session import transaction
    from app.services import jobs, outputs

    svc = world["svc"]
    target = str(world["data"] / "queued-out")
    with transaction(svc.runtime.db) as session:
        queued, _ = jobs.create_job(session=session, job_type="predict", request={"output_uri": target}, owner="alice")
        queued.output_path, queued.output_key = target, outputs.key(target)
    for uri, says in (("queued-out", "where a queued batch prediction will write"), ("queued-out/in", "lies inside")):
        answer = world["bob"].post("/predict", json={**body, "output_uri": uri})
        assert says in _problem(answer, 422)["detail"], answer.text
    with transaction(svc.runtime.db) as session:
        jobs.transition(session=session, job_id=queued.id, sources=[JobStatus.QUEUED], target=JobStatus.CANCELLED)
    written = world["bob"].post("/predict", json={**body, "output_uri": "queued-out"})
    assert written.status_code == 202, written.text
    assert svc.wait(written.json()["id"], TERMINAL)["status"] == "SUCCEEDED"


def test_the_owner_and_an_admin_read_the_output(world: dict[str, Any]) -> None:
    # (the data root holds bob's output of the test above: only the admin reads it whole)
    for client, uris in ((world["alice"], ()), (world["root"], (str(world["data"]),))):
        for uri in ("alice-out", world["default"], "predictions", *uris):
            registered = client.post("/datasets", json={"uri": uri, "options": {"recursiveFileLookup": "true"}})
            assert registered.status_code == 201, (uri, registered.text)
    rows = world["alice"].post("/datasets", json={"uri": "alice-out"}).json()
    assert rows["row_count"] == 40 and {c["name"] for c in rows["schema"]} >= {"id", "prediction"}, rows
    # the owner trains on it (her predictions as a feature): planned and queued, not refused
    body = {**_train("alice-second"), "dataset": {"uri": "alice-out", "features": ["prediction"], "label": "id",
                                                   "task": "regression"}}  # fmt: skip
    assert world["alice"].post("/train", json=body).status_code == 202
