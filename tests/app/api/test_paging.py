"""Paging over real HTTP, on SQLite and PostgreSQL: a job's metrics (``GET /jobs/{id}/metrics``) and the registered
datasets (``GET /datasets``) page by an opaque cursor as ``GET /jobs`` does: every item exactly once, in order,
whatever the limit; ``next_cursor`` null on the last page; a cursor this service did not issue is a 400."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import httpx
import pytest

from tests.helpers import Service, pg_database, running_service
from tests.helpers import problem as _problem

ALICE_KEY = "alice-0123456789abcdef"
BOB_KEY = "bob-0123456789abcdef00"
ROOT_KEY = "root-0123456789abcdef0"
KEYS = f"{ALICE_KEY}:alice, {BOB_KEY}:bob, {ROOT_KEY}:root:admin"
STEPS = 11
KEYS_PER_STEP = 7  # of "loss" and of "accuracy", per worker: 11 steps x 2 workers x 2 x 7 = 308 points


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request: pytest.FixtureRequest, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The service with keys; alice's job with 308 metric points, alice's 5 datasets and bob's 2."""
    base = tmp_path_factory.mktemp("paging")
    data = base / "data"
    data.mkdir()
    (data / "rows.csv").write_text("x,y\n1,2\n3,4\n")
    database = (
        nullcontext(f"sqlite:///{base / 'paging.db'}")
        if request.param == "sqlite"
        else pg_database(request.getfixturevalue("pg_server"))
    )
    with database as db_url, running_service(spark, base, database_url=db_url, data_roots=[data], api_keys=KEYS) as svc:
        clients = {
            who: httpx.Client(base_url=svc.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)
            for who, key in (("alice", ALICE_KEY), ("bob", BOB_KEY), ("root", ROOT_KEY))
        }
        datasets: dict[str, list[str]] = {"alice": [], "bob": []}
        for who, count in (("alice", 5), ("bob", 2)):
            for i in range(count):
                made = clients[who].post("/datasets", json={"uri": "rows.csv", "name": f"{who}-{i}"})
                assert made.status_code == 201, made.text
                datasets[who].append(made.json()["id"])
        try:
            yield {"service": svc, **clients, "job_id": _job_with_metrics(svc), "datasets": datasets}
        finally:
            for client in clients.values():
                client.close()


def _job_with_metrics(svc: Service) -> str:
    """A finished job of alice's whose points of one step were written in two batches (one per worker), so that
    the points of a step are not next to each other in id order, as a job with several workers writes them."""
    from app.core.jobstates import JobStatus
    from app.db.session import transaction
    from app.services import jobs

    with transaction(svc.runtime.db) as session:
        job, _ = jobs.create_job(session=session, job_type="train", request={}, owner="alice")
        jobs.transition(session=session, job_id=job.id, sources=[JobStatus.QUEUED], target=JobStatus.CANCELLED)
    for worker in (0, 1):
        points = [
            {"key": key, "step": step, "epoch": step // 4, "value": step * 1000 + worker * 100 + i, "worker": worker}
            for step in range(STEPS)
            for key in ("loss", "accuracy")
            for i in range(KEYS_PER_STEP)
        ]
        with transaction(svc.runtime.db) as session:
            jobs.add_metrics(session=session, job_id=job.id, points=points)
    return str(job.id)


def _pages(client: httpx.Client, path: str, field: str, limit: int, **params: Any) -> list[Any]:
    """Every item, following ``next_cursor``; each page but the last is full."""
    items: list[Any] = []
    cursor = None
    for _ in range(10_000):
        answer = client.get(path, params={**params, "limit": limit, **({"cursor": cursor} if cursor else {})})
        assert answer.status_code == 200, answer.text
        page = answer.json()
        items.extend(page[field])
        cursor = page["next_cursor"]
        if cursor is None:
            return items
        assert len(page[field]) == limit
    raise AssertionError("the cursor never ended")


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


# --- GET /jobs/{id}/metrics --------------------------------------------------------------------------------------


def test_metrics_page_by_cursor_every_point_once_in_order(world: dict[str, Any]) -> None:
    alice: httpx.Client = world["alice"]
    path = f"/jobs/{world['job_id']}/metrics"
    everything = alice.get(path, params={"limit": 100_000}).json()
    assert everything["next_cursor"] is None
    points = everything["metrics"]
    assert len(points) == STEPS * 2 * 2 * KEYS_PER_STEP == 308
    assert [p["step"] for p in points] == sorted(p["step"] for p in points)
    # the answer says when it was cut (it did not: a default limit cut 308 points silently)
    cut = alice.get(path, params={"limit": 50}).json()
    assert len(cut["metrics"]) == 50 and cut["next_cursor"]
    for limit in (1, 13, 50, 307, 308, 309):  # pages ending inside a step, on one, and at the very end
        assert _pages(alice, path, "metrics", limit) == points, limit
    # with the filters, the cursor continues inside them
    losses = [p for p in points if p["key"] == "loss" and p["step"] > 3]
    assert _pages(alice, path, "metrics", 10, key="loss", since_step=3) == losses
    # the old parameters keep their meaning
    assert alice.get(path, params={"key": "loss", "since_step": 3}).json() == {"metrics": losses, "next_cursor": None}


def test_metrics_cursors_this_service_did_not_issue_are_400(world: dict[str, Any]) -> None:
    alice: httpx.Client = world["alice"]
    path = f"/jobs/{world['job_id']}/metrics"
    issued = alice.get(path, params={"limit": 5}).json()["next_cursor"]
    dataset_cursor = world["root"].get("/datasets", params={"limit": 1}).json()["next_cursor"]
    jobs_cursor = _b64(f"2024-01-01T00:00:00+00:00|{'0' * 32}")
    forged = ["zz", "!!!", "m1", dataset_cursor, jobs_cursor, _b64("m1|1"), _b64("m1|1|2|3"),
              _b64("m2|1|2"), _b64("m1|x|2"), _b64("m1|1|+2"), _b64("m1|1|-2"), _b64("m1| 1|2"),
              _b64(f"m1|{2**31}|2"), _b64(f"m1|1|{2**63}"), _b64("m1|1|2\x00")]  # fmt: skip
    for cursor in forged:
        problem = _problem(alice.get(path, params={"cursor": cursor}), 400)
        assert "cursor" in problem["detail"], cursor
    assert alice.get(path, params={"cursor": issued}).status_code == 200


# --- GET /datasets -----------------------------------------------------------------------------------------------


def test_datasets_page_newest_first_and_by_owner(world: dict[str, Any]) -> None:
    mine = list(reversed(world["datasets"]["alice"]))
    first = world["alice"].get("/datasets", params={"limit": 1}).json()
    assert [d["id"] for d in first["items"]] == mine[:1] and first["next_cursor"]
    for limit in (1, 2, 4, 5, 6):
        assert [d["id"] for d in _pages(world["alice"], "/datasets", "items", limit)] == mine, limit
    assert [d["id"] for d in _pages(world["bob"], "/datasets", "items", 1)] == list(reversed(world["datasets"]["bob"]))
    everyone = [d["id"] for d in _pages(world["root"], "/datasets", "items", 3)]
    assert sorted(everyone) == sorted(mine + world["datasets"]["bob"])
    assert everyone == [d["id"] for d in world["root"].get("/datasets").json()["items"]]


def test_datasets_cursors_this_service_did_not_issue_are_400(world: dict[str, Any]) -> None:
    alice: httpx.Client = world["alice"]
    metrics_cursor = alice.get(f"/jobs/{world['job_id']}/metrics", params={"limit": 1}).json()["next_cursor"]
    from datetime import UTC, datetime

    from app.services.cursors import encode_cursor

    jobs_cursor = encode_cursor(datetime.now(UTC), world["job_id"])  # GET /jobs' own: it was taken as a position
    for cursor in ["zz", "!!!", metrics_cursor, jobs_cursor, _b64(f"2024-01-01T00:00:00+00:00|{'0' * 32}"),
                   _b64(f"datasets|2024-01-01T00:00:00|{'0' * 32}"), _b64("2024-01-01|x")]:  # fmt: skip
        problem = _problem(alice.get("/datasets", params={"cursor": cursor}), 400)
        assert "cursor" in problem["detail"], cursor
    datasets_cursor = alice.get("/datasets", params={"limit": 1}).json()["next_cursor"]
    assert "cursor" in _problem(world["root"].get("/jobs", params={"cursor": datasets_cursor}), 400)["detail"]
    # another owner's cursor shows nothing of theirs: it is a position, the list stays the caller's
    bobs = world["bob"].get("/datasets", params={"limit": 1}).json()["next_cursor"]
    assert all(d["owner"] == "alice" for d in alice.get("/datasets", params={"cursor": bobs}).json()["items"])


# --- GET /jobs?name= ------------------------------------------------------------------------------------------------


def test_jobs_by_name_or_model_name_any_case_wildcards_plain(world: dict[str, Any]) -> None:
    """``?name=`` keeps the jobs whose name or model name holds the text, in any case, within the caller's own jobs;
    ``%`` and ``_`` are plain characters (not SQL wildcards), and the filter pages by cursor as the list does."""
    from app.db.session import transaction
    from app.services import jobs

    made: dict[str, str] = {}
    with transaction(world["service"].runtime.db) as session:
        for owner, name, model in (
            ("alice", "Taxi-Fare", None),
            ("alice", "taxi_fare_2", None),
            ("alice", None, "NYC-TAXI-evaluated"),  # an evaluation: no name, the model it uses
            ("alice", "digits-100%", None),
            ("alice", "digitsX100", None),
            ("bob", "taxi-bob", None),
        ):
            job, _ = jobs.create_job(session=session, job_type="train", request={}, name=name, owner=owner)
            job.model_name = model
            made[name or model or ""] = job.id
    alice, bob, root = world["alice"], world["bob"], world["root"]

    def names(client: httpx.Client, text: str, limit: int = 50) -> set[str]:
        got = _pages(client, "/jobs", "items", limit, name=text)
        assert len(got) == len({j["id"] for j in got})  # every job once
        return {j["id"] for j in got}

    assert names(alice, "taxi", limit=1) == {made["Taxi-Fare"], made["taxi_fare_2"], made["NYC-TAXI-evaluated"]}
    assert names(root, "TAXI") == names(alice, "taxi") | {made["taxi-bob"]}  # an admin sees every owner's
    assert names(bob, "taxi") == {made["taxi-bob"]}
    assert names(alice, "_") == {made["taxi_fare_2"]}  # not "any one character"
    assert names(alice, "100%") == {made["digits-100%"]}  # not "anything"
    assert names(alice, "nothing-has-this") == set()
    everything = {j["id"] for j in _pages(alice, "/jobs", "items", 500)}
    assert names(alice, "") == everything  # empty: no filter
    assert "name" in _problem(alice.get("/jobs", params={"name": "x" * 201}), 422)["detail"]


# --- GET /models ---------------------------------------------------------------------------------------------------


def test_models_page_by_name_and_by_owner(world: dict[str, Any]) -> None:
    """``GET /models`` pages in name order by cursor (it cut at ``limit`` with no way to go on: a registry of more
    than 1,000 models could not be listed whole)."""
    from app.db.session import transaction
    from app.services import jobs, models

    names = {"alice": ["a-1", "a.2", "a_3", "b-0", "z9"], "bob": ["a-10", "m"]}
    with transaction(world["service"].runtime.db) as session:
        for owner, owned in names.items():
            for name in owned:
                job, _ = jobs.create_job(session=session, job_type="train", request={}, name=name, owner=owner)
                models.register_version(session=session, name=name, framework="spark_ml", artifact_uri="file:///x",
                                        metrics={}, params={}, job_id=job.id, owner=owner)  # fmt: skip
    mine = sorted(names["alice"])
    first = world["alice"].get("/models", params={"limit": 2}).json()
    assert [m["name"] for m in first["items"]] == mine[:2] and first["next_cursor"]
    for limit in (1, 2, 4, 5, 6):
        assert [m["name"] for m in _pages(world["alice"], "/models", "items", limit)] == mine, limit
    everyone = [m["name"] for m in _pages(world["root"], "/models", "items", 3)]
    assert everyone == sorted(names["alice"] + names["bob"])
    assert world["root"].get("/models").json()["next_cursor"] is None
    datasets_cursor = world["alice"].get("/datasets", params={"limit": 1}).json()["next_cursor"]
    for cursor in ("zz", datasets_cursor, _b64("models|"), _b64("models"), _b64("jobs|a")):
        assert "cursor" in _problem(world["alice"].get("/models", params={"cursor": cursor}), 400)["detail"], cursor
