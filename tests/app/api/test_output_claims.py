"""Two batch predictions sent at once to one ``output_uri`` (security walkthrough F2), over real HTTP on SQLite and
PostgreSQL: the second is a 422 naming ``output_uri``, decided with the first's job in the database, and the first
writes its output. Before, both were queued (the path was checked in a session of its own, then the job inserted),
and the later job replaced the earlier one's finished output.

The race is made certain, not hoped for: alice's check passes, then bob's whole request runs inside her window
(before her job is inserted), or stops waiting for her claim, which is what the fix makes it do."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from app.services import outputs
from tests.helpers import (
    ENDED,
    LINEAR_ROWS,
    OWNER_KEYS_SETTING,
    finished,
    owner_clients,
    pg_database,
    problem,
    running_service,
)
from tests.helpers import linear_train_body as _train
from workers.inference.spec import OUTPUT_MARKER

WAIT_S = 120.0


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request: pytest.FixtureRequest, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    base = tmp_path_factory.mktemp("claims")
    data = base / "data"
    data.mkdir()
    (data / "rows.csv").write_text(LINEAR_ROWS)
    if request.param == "sqlite":
        from contextlib import nullcontext

        database: Any = nullcontext(f"sqlite:///{base / 'claims.db'}")
    else:
        database = pg_database(request.getfixturevalue("pg_server"))
    with (
        database as db_url,
        running_service(spark, base, database_url=db_url, data_roots=[data], api_keys=OWNER_KEYS_SETTING) as svc,
        owner_clients(svc) as clients,
    ):
        finished(svc, clients["alice"].post("/train", json=_train("alice-model")))
        finished(svc, clients["bob"].post("/train", json=_train("bob-model")))
        yield {"svc": svc, **clients, "data": data, "db_url": db_url, "backend": request.param}


class _Watched:
    """The claim's process lock, saying when a second caller has to wait for it."""

    def __init__(self) -> None:
        self._lock, self.waiting = threading.Lock(), threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        self.waiting.set()
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()


def _batch(model: str, output: str) -> dict[str, Any]:
    return {"model": {"name": model}, "dataset": {"uri": "rows.csv", "key": "id"}, "output_uri": output}


def test_the_second_of_two_predictions_to_one_path_is_refused(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    svc, alice, bob = world["svc"], world["alice"], world["bob"]
    claim_lock, real_check = _Watched(), outputs.check_target
    first_checked, second_answered = threading.Event(), threading.Event()
    checks: list[str] = []

    def check_target(session: Any, **kwargs: Any) -> None:
        real_check(session, **kwargs)
        checks.append(kwargs["target"])
        if len(checks) == 1:  # alice's passed: bob's request now comes, before her job is inserted
            first_checked.set()
            deadline = time.monotonic() + WAIT_S
            while not (second_answered.is_set() or claim_lock.waiting.is_set()) and time.monotonic() < deadline:
                time.sleep(0.01)

    monkeypatch.setattr(outputs, "_CLAIMING", claim_lock, raising=False)
    monkeypatch.setattr(outputs, "check_target", check_target)
    answers: dict[str, httpx.Response] = {}

    def post(who: str, client: httpx.Client, model: str) -> None:
        answers[who] = client.post("/predict", json=_batch(model, "race-out"))
        if who == "bob":
            second_answered.set()

    first = threading.Thread(target=post, args=("alice", alice, "alice-model"))
    first.start()
    assert first_checked.wait(WAIT_S), "alice's request never checked its output path"
    second = threading.Thread(target=post, args=("bob", bob, "bob-model"))
    second.start()
    first.join(WAIT_S)
    second.join(WAIT_S)
    assert answers["alice"].status_code == 202, answers["alice"].text
    refused = problem(answers["bob"], 422)
    assert [e["loc"] for e in refused["errors"]] == ["output_uri"], refused
    assert "'race-out' is where a queued batch prediction will write; name a new path" in refused["detail"]
    job = svc.wait(answers["alice"].json()["id"], ENDED)
    assert job["status"] == "SUCCEEDED", job["error"]
    output = Path(job["request"]["output_uri"])
    assert (output / OUTPUT_MARKER).read_text() == job["id"]
    assert [j["id"] for j in bob.get("/jobs", params={"type": "predict"}).json()["items"]] == []


def test_on_postgresql_every_driver_waits_for_the_claim(world: dict[str, Any]) -> None:
    """Another driver (a connection of its own) holds the claim: the request waits for it, then is answered."""
    if world["backend"] != "postgresql":
        pytest.skip("SQLite has one driver: the process lock is the claim")
    engine = create_engine(world["db_url"], isolation_level="AUTOCOMMIT")
    waiting = text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                   "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")  # fmt: skip
    answers: list[httpx.Response] = []
    try:
        with engine.connect() as other:
            other.execute(text("SELECT pg_advisory_lock(:k)"), {"k": outputs.CLAIM_LOCK})
            request = threading.Thread(
                target=lambda: answers.append(world["alice"].post("/predict", json=_batch("alice-model", "held")))
            )
            request.start()
            deadline = time.monotonic() + WAIT_S
            while not other.execute(waiting).scalar() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert other.execute(waiting).scalar() == 1, "the request did not wait for the other driver's claim"
            assert not answers and request.is_alive()
            other.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": outputs.CLAIM_LOCK})
            request.join(WAIT_S)
    finally:
        engine.dispose()
    assert answers and answers[0].status_code == 202, answers
    job = world["svc"].wait(answers[0].json()["id"], ENDED)
    assert job["status"] == "SUCCEEDED", job["error"]
