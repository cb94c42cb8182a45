"""GET /metrics parses with prometheus-client's own parser, and its job figures are the database's."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from app.db.base import utcnow
from app.db.models import Job
from app.db.session import transaction
from app.services import jobs
from app.services.monitoring import DURATION_BUCKETS
from tests.helpers import Service

STATES = ["QUEUED", "STARTING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLING", "CANCELLED"]
KINDS = [("train", "torch"), ("train", "xgboost"), ("train", "spark_ml"), ("evaluate", None), ("predict", None)]


@pytest.fixture
def svc(make_service: Any, db_url: str) -> Iterator[Service]:
    with make_service(database_url=db_url, in_process_consumer=False, heartbeat_stale_s=3600) as service:
        yield service


def _seed(svc: Service, n: int = 60) -> list[dict[str, Any]]:
    rng = random.Random(16)
    now = utcnow()
    seeded = []
    with transaction(svc.runtime.db) as s:
        for i in range(n):
            job_type, framework = KINDS[i % len(KINDS)]
            status = STATES[rng.randrange(len(STATES))]
            job, _ = jobs.create_job(session=s, job_type=job_type, request={}, framework=framework, name=f"m{i}")
            job.status = status
            seconds = None
            if status != "QUEUED":
                job.started_at = now - timedelta(seconds=4000)
                job.heartbeat_at = now
            if status in ("SUCCEEDED", "FAILED", "CANCELLED"):
                seconds = rng.choice([0.4, 3.0, 14.0, 59.0, 61.0, 299.0, 1000.0, 3601.0, 30000.0])
                job.finished_at = job.started_at + timedelta(seconds=seconds)
            seeded.append({"id": job.id, "type": job_type, "family": framework or "none", "status": status,
                           "seconds": seconds})  # fmt: skip
    return seeded


def _families(svc: Service, **kwargs: Any) -> dict[str, Any]:
    answer = svc.client.get("/metrics", **kwargs)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(answer.text)}


def _value(families: dict[str, Any], sample: str, **labels: str) -> float | None:
    for family in families.values():
        for s in family.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


def test_job_figures_match_the_database(svc: Service) -> None:
    seeded = _seed(svc)
    families = _families(svc)
    with svc.runtime.db() as s:
        in_db = {
            (t, f or "none", st): n
            for t, f, st, n in s.execute(
                select(Job.type, Job.framework, Job.status, func.count()).group_by(Job.type, Job.framework, Job.status)
            )
        }
    assert in_db == Counter((j["type"], j["family"], j["status"]) for j in seeded)
    exported = {
        (s.labels["type"], s.labels["family"], s.labels["state"]): s.value for s in families["sparktrain_jobs"].samples
    }
    assert exported == in_db
    assert _value(families, "sparktrain_queue_depth") == sum(1 for j in seeded if j["status"] == "QUEUED")

    finished = [j for j in seeded if j["seconds"] is not None]
    for job_type, family in {(j["type"], j["family"]) for j in finished}:
        mine = [j["seconds"] for j in finished if (j["type"], j["family"]) == (job_type, family)]
        labels = {"type": job_type, "family": family}
        assert _value(families, "sparktrain_job_duration_seconds_count", **labels) == len(mine)
        assert _value(families, "sparktrain_job_duration_seconds_sum", **labels) == pytest.approx(sum(mine), rel=1e-6)
        for bound in DURATION_BUCKETS:
            got = _value(families, "sparktrain_job_duration_seconds_bucket", le=str(bound), **labels)
            assert got == sum(1 for x in mine if x <= bound), (labels, bound)


def test_running_torch_jobs_and_http_requests(svc: Service) -> None:
    now = utcnow()
    with transaction(svc.runtime.db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={}, framework="torch", name="live")
        job.status, job.started_at, job.heartbeat_at = "RUNNING", now, now
        job_id = job.id
    for batch in range(3):  # three flushes of 5 steps, one second apart, as the trainer's monitor writes them
        at = now + timedelta(seconds=batch)
        points = []
        for step in range(batch * 5 + 1, batch * 5 + 6):
            for worker in (0, 1):
                values = {"samples_per_s": 100.0 + worker + step, "tau": 0.01 * (worker + 1), "sparsity": 0.002,
                          "wire_bytes": 1000.0, "dense_bytes": 40_000.0}  # fmt: skip
                points += [
                    {"key": k, "step": step, "worker": worker, "value": v, "time": at} for k, v in values.items()
                ]
        with transaction(svc.runtime.db) as s:
            jobs.add_metrics(session=s, job_id=job_id, points=points)
    with transaction(svc.runtime.db) as s:  # a second running job: each job's figures are its own
        other, _ = jobs.create_job(session=s, job_type="train", request={}, framework="torch", name="other")
        other.status, other.started_at, other.heartbeat_at = "RUNNING", now, now
        jobs.add_metrics(session=s, job_id=other.id, points=[
            {"key": "samples_per_s", "step": 1, "worker": 0, "value": 7.0, "time": now},
            {"key": "samples_per_s", "step": 2, "worker": 0, "value": 9.0, "time": now}])  # fmt: skip
        other_id = other.id
    assert svc.client.get(f"/jobs/{job_id}").status_code == 200
    assert svc.client.get("/jobs/" + "f" * 32).status_code == 404
    assert svc.client.get("/openapi.json").status_code == 200  # a route outside the schema has its own label too
    families = _families(svc)
    labels = {"job_id": job_id, "name": "live"}
    assert _value(families, "sparktrain_torch_samples_per_second", **labels) == (100 + 15) + (101 + 15)
    assert _value(families, "sparktrain_torch_tau", **labels) == pytest.approx(0.015)
    assert _value(families, "sparktrain_torch_sparsity", **labels) == pytest.approx(0.002)
    # the two flushes after the oldest in the window: 2 x 5 steps x 2 workers x 1000 bytes, over 2 seconds
    assert _value(families, "sparktrain_torch_wire_bytes_per_second", **labels) == pytest.approx(10_000.0)
    assert _value(families, "sparktrain_torch_samples_per_second", job_id=other_id, name="other") == 9.0
    assert _value(families, "sparktrain_torch_tau", job_id=other_id, name="other") is None
    ok = {"method": "GET", "route": "/jobs/{job_id}", "status": "200"}
    assert _value(families, "sparktrain_http_request_duration_seconds_count", **ok) == 1
    assert _value(families, "sparktrain_http_request_duration_seconds_count", **{**ok, "status": "404"}) == 1
    schema = {"method": "GET", "route": "/openapi.json", "status": "200"}
    assert _value(families, "sparktrain_http_request_duration_seconds_count", **schema) == 1
    for name in (
        "sparktrain_executors",
        "sparktrain_executor_cores",
        "sparktrain_gpus",
        "sparktrain_model_cache_hits_total",
    ):
        assert _value(families, name) is not None, name
    assert _value(families, "sparktrain_executor_cores") >= 1


def test_wire_rate_from_the_workers_running_totals(svc: Service) -> None:
    """Trainers that sample their step events report each worker's running total of bytes sent
    (``wire_bytes_sent``): the rate is each worker's growth after its oldest batch in the window, summed; a total that
    falls (a new attempt's) counts again from its fall, and points older than the window are left out."""
    now = utcnow()
    with transaction(svc.runtime.db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={}, framework="torch", name="sampled")
        job.status, job.started_at, job.heartbeat_at = "RUNNING", now, now
        job_id = job.id
    series = {  # worker -> (seconds before now, total): two or three sampled steps per half-second batch
        0: [(30.0, 1e9), (4.0, 1000.0), (4.0, 3000.0), (2.0, 5000.0), (2.0, 7000.0), (0.0, 11_000.0)],
        1: [(4.0, 500.0), (2.0, 900.0), (0.0, 100.0), (0.0, 300.0)],  # restarted between the last two batches
    }
    points = [
        {"key": "wire_bytes_sent", "step": step, "worker": w, "value": v, "time": now - timedelta(seconds=ago)}
        for w, rows in series.items()
        for step, (ago, v) in enumerate(rows)
    ]
    with transaction(svc.runtime.db) as s:
        jobs.add_metrics(session=s, job_id=job_id, points=points)
    families = _families(svc)
    # worker 0: (11,000 - 3,000) / 4 s; worker 1: (900 - 500) + (300 - 100), over 4 s
    expected = 8000 / 4 + 600 / 4
    got = _value(families, "sparktrain_torch_wire_bytes_per_second", job_id=job_id, name="sampled")
    assert got == pytest.approx(expected)


@pytest.mark.parametrize("public", [False, True])
def test_metrics_need_an_admin_key_unless_public(make_service: Any, public: bool) -> None:
    keys = "admin-0123456789abcdef:ops:admin,alice-0123456789abcdef:alice"
    with make_service(api_keys=keys, metrics_public=public, in_process_consumer=False) as svc:
        anonymous = svc.client.get("/metrics")
        alice = svc.client.get("/metrics", headers={"Authorization": "Bearer alice-0123456789abcdef"})
        admin = svc.client.get("/metrics", headers={"Authorization": "Bearer admin-0123456789abcdef"})
        assert admin.status_code == 200
        if public:
            assert anonymous.status_code == 200 and alice.status_code == 200
        else:
            assert anonymous.status_code == 401
            assert alice.status_code == 403 and alice.headers["content-type"] == "application/problem+json"
            assert alice.json()["request_id"] == alice.headers["x-request-id"]
        refused = _families(svc, headers={"Authorization": "Bearer admin-0123456789abcdef"})
        assert _value(refused, "sparktrain_http_request_duration_seconds_count", method="GET", route="/metrics",
                      status="401" if not public else "200") is not None  # fmt: skip
