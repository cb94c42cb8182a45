"""PostgreSQL restarted in the middle of a training job, on a PostgreSQL server of the test's own: while it is away
every request is answered 503 problem+json (never a 500 or the driver's raw error), the job's writes (progress,
metrics, checkpoints, heartbeats, its final state) wait for it with backoff, and the job still finishes in its
first attempt once the database is back."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from bench.chaos import digits_job
from bench.processes import PgServer
from tests.helpers import running_service

pytestmark = pytest.mark.slow


def test_a_postgresql_restart_mid_job_is_a_503_for_requests_and_nothing_for_the_job(spark: Any, tmp_path: Path) -> None:
    with PgServer() as pg, running_service(spark, tmp_path, database_url=pg.url) as svc:
        job_id = svc.train(digits_job("through-a-restart", epochs=30, units=64, batch=16))["id"]
        deadline = time.monotonic() + 300
        while (job := svc.client.get(f"/jobs/{job_id}").json())["progress"] < 0.05:
            assert job["status"] in ("QUEUED", "STARTING", "RUNNING"), job
            assert time.monotonic() < deadline, job
            time.sleep(0.1)

        before = len(svc.client.get(f"/jobs/{job_id}/checkpoints").json()["checkpoints"])
        pg.stop("fast")  # every connection is cut, as by an operator's restart
        answers = []
        for path in (f"/jobs/{job_id}", "/jobs", f"/jobs/{job_id}/metrics", "/models"):
            answers.append(svc.client.get(path))
        # V2's readiness said 200 while its infer answered 503; /metrics was a 503, the driver's own figures too
        v2_ready = svc.client.get("/v2/health/ready")
        scraped = svc.client.get("/metrics")
        time.sleep(3)  # the job keeps training and tries to write meanwhile
        answers.append(svc.client.get(f"/jobs/{job_id}"))
        pg.start()
        assert v2_ready.status_code == 503 and "database" in v2_ready.json()["detail"], v2_ready.text
        assert scraped.status_code == 200, scraped.text
        assert (
            "sparktrain_database_up 0.0" in scraped.text and "sparktrain_http_request_duration_seconds" in scraped.text
        )
        assert "sparktrain_queue_depth" not in scraped.text  # a job figure: read from the database

        for answer in answers:
            assert answer.status_code == 503, answer.text
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.headers["retry-after"] == "5"
            problem = answer.json()
            assert problem["type"].endswith("/database-unavailable") and "psycopg" not in answer.text, problem
        job = svc.wait(job_id, {"SUCCEEDED", "FAILED"}, timeout=600)
        assert job["status"] == "SUCCEEDED", job["error"]
        assert svc.client.get("/v2/health/ready").status_code == 200
        assert "sparktrain_database_up 1.0" in svc.client.get("/metrics").text
        assert job["attempt"] == 1, "the restart cost the job nothing"
        epochs = [c["epoch"] for c in svc.client.get(f"/jobs/{job_id}/checkpoints").json()["checkpoints"]]
        assert len(epochs) > before and len(epochs) == len(set(epochs)), "checkpoints were recorded after it"
