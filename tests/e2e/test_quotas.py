"""Quotas per owner over real HTTP: a job over the concurrent-jobs quota, or over the task-slots quota, waits in
QUEUED (its ``waiting_for`` says which) and starts when the owner's running job ends; a submit over the
queued-jobs quota and requests over the per-key rate are 429 problem+json naming the quota, with ``Retry-After``;
a job that could never fit the owner's task slots is a 422; ``GET /owners/me/usage`` shows the quotas and what is
used, and an owner's usage is visible to that owner and admins only."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from bench.chaos import digits_job
from tests.helpers import Service, running_service

pytestmark = pytest.mark.slow
ALICE, BOB, CAROL = "alice-key-0123456789", "bob-key-0123456789ab", "carol-key-0123456789"
ROOT = "root-key-0123456789a"


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    quotas = {
        "alice": {"concurrent_jobs": 1, "queued_jobs": 1, "task_slots": 1},
        "bob": {"requests_per_s": 2},
        "carol": {"task_slots": 1},
    }  # carol: no limit on jobs at once, one task slot
    keys = f"{ALICE}:alice,{BOB}:bob,{CAROL}:carol,{ROOT}:root:admin"
    with running_service(spark, tmp_path_factory.mktemp("quotas"), api_keys=keys, owner_quotas=quotas,
                         reconcile_interval_s=1.0) as service:  # fmt: skip
        yield service


def _as(svc: Service, key: str) -> httpx.Client:
    return httpx.Client(base_url=svc.url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _job(client: httpx.Client, job_id: str, until: Any, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not until(job := client.get(f"/jobs/{job_id}").json()):
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    return dict(job)


def test_a_job_over_the_concurrent_quota_waits_and_submits_over_the_queued_quota_are_429(svc: Service) -> None:
    alice = _as(svc, ALICE)
    # each owner's first job trains at batch 2, for seconds: the checks below need it still running
    first = alice.post("/train", json=digits_job("alice-1", epochs=6, units=64, batch=2, workers=1)).json()["id"]
    _job(alice, first, lambda j: j["status"] == "RUNNING")
    second = alice.post("/train", json=digits_job("alice-2", epochs=1, workers=1)).json()["id"]
    waiting = _job(alice, second, lambda j: j["waiting_for"] is not None)
    assert (waiting["status"], waiting["waiting_for"]) == ("QUEUED", "concurrent_jobs")

    over = alice.post("/train", json=digits_job("alice-3", epochs=1, workers=1))
    assert over.status_code == 429 and over.headers["content-type"] == "application/problem+json"
    assert int(over.headers["retry-after"]) > 0
    problem = over.json()
    assert (problem["quota"], problem["limit"], problem["used"]) == ("queued_jobs", 1, 1)
    too_big = alice.post("/train", json=digits_job("alice-4", epochs=1, workers=2))  # the cluster has 2 slots
    assert too_big.status_code == 422 and too_big.json()["quota"] == "task_slots"
    assert [e["loc"] for e in too_big.json()["errors"]] == ["training.num_workers"], too_big.json()  # not num_workers

    usage = alice.get("/owners/me/usage").json()
    assert usage["owner"] == "alice" and usage["waiting"] == {"concurrent_jobs": 1}
    assert usage["quotas"]["concurrent_jobs"] == {"limit": 1, "used": 1}
    assert usage["quotas"]["task_slots"] == {"limit": 1, "used": 1}
    assert usage["quotas"]["queued_jobs"] == {"limit": 1, "used": 1}

    done = [_job(alice, job_id, lambda j: j["status"] in ("SUCCEEDED", "FAILED")) for job_id in (first, second)]
    assert [j["status"] for j in done] == ["SUCCEEDED", "SUCCEEDED"], [j["error"] for j in done]
    assert done[1]["attempt"] == 1 and done[1]["waiting_for"] is None, "waiting cost it no attempt"
    assert done[1]["started_at"] >= done[0]["finished_at"], "it started once the first one had ended"


def test_a_job_over_the_slot_quota_waits_in_queued_and_runs_once_the_owners_other_job_ends(svc: Service) -> None:
    """carol may hold one task slot and run any number of jobs: her second one-worker job finds a free slot on the
    cluster (local[2]) and a free consumer, and still waits, for the quota alone."""
    carol = _as(svc, CAROL)
    first = carol.post("/train", json=digits_job("carol-1", epochs=6, units=64, batch=2, workers=1)).json()["id"]
    _job(carol, first, lambda j: j["status"] == "RUNNING")
    second = carol.post("/train", json=digits_job("carol-2", epochs=1, workers=1)).json()["id"]
    waiting = _job(carol, second, lambda j: j["waiting_for"] is not None or j["status"] != "QUEUED")
    assert (waiting["status"], waiting["waiting_for"], waiting["slots"]) == ("QUEUED", "task_slots", 1), waiting
    assert carol.get(f"/jobs/{first}").json()["status"] == "RUNNING", "it waits while the first job holds the slot"
    logs = [line["message"] for line in carol.get(f"/jobs/{second}/logs").json()["lines"]]
    assert any(m.startswith("waits in QUEUED: its owner's task_slots quota is used up") for m in logs), logs

    usage = carol.get("/owners/me/usage").json()
    assert usage["owner"] == "carol" and usage["waiting"] == {"task_slots": 1}, usage
    assert usage["quotas"]["task_slots"] == {"limit": 1, "used": 1}
    assert usage["quotas"]["concurrent_jobs"] == {"limit": None, "used": 1}, "no job-count quota holds it"

    done = [_job(carol, job_id, lambda j: j["status"] in ("SUCCEEDED", "FAILED")) for job_id in (first, second)]
    assert [j["status"] for j in done] == ["SUCCEEDED", "SUCCEEDED"], [j["error"] for j in done]
    assert done[1]["attempt"] == 1 and done[1]["waiting_for"] is None, "waiting cost it no attempt"
    assert done[1]["started_at"] >= done[0]["finished_at"], "it started once the first one had ended"
    assert carol.get("/owners/me/usage").json()["quotas"]["task_slots"] == {"limit": 1, "used": 0}


def test_requests_over_the_rate_are_429_per_key_and_health_checks_never(svc: Service) -> None:
    bob = _as(svc, BOB)
    answers = [bob.get("/jobs", params={"limit": 1}) for _ in range(12)]
    limited = [a for a in answers if a.status_code == 429]
    assert limited and all(a.status_code in (200, 429) for a in answers), [a.status_code for a in answers]
    problem = limited[0].json()
    assert (problem["quota"], problem["limit"]) == ("requests_per_s", 2)
    assert int(limited[0].headers["retry-after"]) >= 1 and limited[0].headers.get("x-request-id")
    assert all(bob.get("/healthz").status_code == 200 for _ in range(10))
    assert _as(svc, ALICE).get("/jobs", params={"limit": 1}).status_code == 200, "another key has its own bucket"


def test_an_owners_usage_is_visible_to_that_owner_and_admins_only(svc: Service) -> None:
    time.sleep(1.5)  # bob spent his bucket (2 requests a second) in the test before: let it refill
    assert _as(svc, BOB).get("/owners/alice/usage").status_code == 404
    assert _as(svc, ALICE).get("/owners/alice/usage").json()["owner"] == "alice"
    admin = _as(svc, ROOT).get("/owners/alice/usage")
    assert admin.status_code == 200 and admin.json()["quotas"]["concurrent_jobs"]["limit"] == 1
    # an admin's typo is no owner without limits (it was a 200 with every limit null: walkthrough)
    for nobody in ("ALICE", "nobody"):
        missing = _as(svc, ROOT).get(f"/owners/{nobody}/usage")
        assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json", nobody
    assert _as(svc, ROOT).get("/owners/carol/usage").status_code == 200, "a key's owner, whatever it has done"
    assert httpx.get(f"{svc.url}/owners/me/usage").status_code == 401
