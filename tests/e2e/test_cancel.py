"""Cancel through the service, at each state a test can hold a job in, twice, and after the end.

- QUEUED (the consumer busy with another job): CANCELLED at once; when its message finally arrives it is
  dropped, the job never starts;
- RUNNING, training: CANCELLING, then the runner stops it and it ends CANCELLED with its checkpoints kept and no
  model. A torch job's workers are told to stop at their next step and its stage ends by itself (JobCancelled),
  so its Spark job group is not killed and the Python workers live on; the group is cancelled only if the stage
  still runs after the grace (workers/training/torch/driver.py CANCEL_GRACE_S). The driver process, which holds
  the SparkSession, is never killed: the same Spark application runs the next job;
- right after submitting (QUEUED, STARTING or early RUNNING, whichever it is in): it ends CANCELLED, never ran to
  the end;
- twice: the repeat answers 202 with the same state; after the end: SUCCEEDED and FAILED are a 409
  problem+json, CANCELLED answers 202 again.

(The cancel that arrives while the work is finishing is tests/workers/test_runner_ownership.py: no timing from
outside can pin it.)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from bench.chaos import digits_job
from tests.e2e.chaos_support import log_lines, wait_final, wait_for_epoch
from tests.helpers import Service

pytestmark = pytest.mark.slow


@pytest.fixture
def svc(make_service: Callable[..., Any]) -> Iterator[Service]:
    with make_service(consumer_concurrency=1) as service:
        yield service


def _cancel(svc: Service, job_id: str) -> dict[str, Any]:
    response = svc.client.post(f"/jobs/{job_id}/cancel")
    assert response.status_code == 202, response.text
    return dict(response.json())


def _conflict(svc: Service, job_id: str) -> dict[str, Any]:
    response = svc.client.post(f"/jobs/{job_id}/cancel")
    assert response.status_code == 409, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = dict(response.json())
    assert problem["status"] == 409 and "already finished" in problem["detail"]
    return problem


def test_cancel_a_queued_and_a_running_job_twice_each(svc: Service) -> None:
    sc = svc.runtime.spark.sparkContext
    app_id = sc.applicationId
    # one barrier worker: a slot stays free for the Spark job that checks the next POST /train against its data
    running = svc.train(digits_job("long", epochs=600, units=256, batch=16, workers=1))["id"]  # cancelled long before
    wait_for_epoch(svc.client, running, 2)
    queued = svc.train(digits_job("queued"))["id"]
    assert svc.client.get(f"/jobs/{queued}").json()["status"] == "QUEUED"  # one consumer thread, and it is busy

    first, again = _cancel(svc, queued), _cancel(svc, queued)
    assert first["status"] == again["status"] == "CANCELLED"
    assert first["error"] == again["error"] == {"reason": "CANCELLED", "message": "cancelled before it started"}
    assert first["progress_message"] == "cancelled before it started"  # not what it said while queued (audit)

    stopping = _cancel(svc, running)
    assert stopping["status"] in ("CANCELLING", "CANCELLED")
    assert _cancel(svc, running)["status"] in ("CANCELLING", "CANCELLED")  # the repeat changes nothing
    done = wait_final(svc.client, running, timeout=120)
    assert done["status"] == "CANCELLED", done
    assert done["error"]["reason"] == "CANCELLED" and done["model"] is None
    assert sum(line.startswith("cancelled") for line in log_lines(svc.client, running)) == 1
    assert "cancelled: the job stopped at its next check" in log_lines(svc.client, running), "the stage was killed"
    checkpoints = svc.client.get(f"/jobs/{running}/checkpoints").json()["checkpoints"]
    assert checkpoints, "the checkpoints written before the cancel are kept"
    for c in checkpoints:
        assert (Path(urlparse(c["uri"]).path) / "weights.safetensors").exists()
    tracker = sc.statusTracker()
    assert not set(tracker.getActiveJobsIds()) & set(tracker.getJobIdsForGroup(running))
    assert _cancel(svc, running)["status"] == "CANCELLED"  # cancelling a cancelled job stays harmless

    # The queued job's message reaches the consumer now: it is dropped, the job never starts.
    deadline = time.monotonic() + 60
    while not any("ignored" in line for line in log_lines(svc.client, queued)):
        assert time.monotonic() < deadline, "the cancelled job's message was never delivered"
        time.sleep(0.2)
    assert not any(line.startswith("attempt 1 started") for line in log_lines(svc.client, queued))
    assert svc.client.get(f"/jobs/{queued}").json()["status"] == "CANCELLED"

    # The process that holds the SparkSession was not killed: the same application runs the next job.
    after = wait_final(svc.client, svc.train(digits_job("after", epochs=1))["id"])
    assert after["status"] == "SUCCEEDED", after["error"]
    assert after["spark_app_id"] == app_id == sc.applicationId
    assert svc.client.get("/cluster").json()["driver"]["pid"] == os.getpid()


def test_cancel_right_after_submitting_and_after_the_end(svc: Service) -> None:
    early = svc.train(digits_job("early", epochs=30))["id"]
    assert _cancel(svc, early)["status"] in ("CANCELLED", "CANCELLING")
    done = wait_final(svc.client, early, timeout=120)
    assert done["status"] == "CANCELLED" and done["model"] is None, done

    finished = wait_final(svc.client, svc.train(digits_job("finished", epochs=1))["id"])
    assert finished["status"] == "SUCCEEDED", finished["error"]
    assert _conflict(svc, finished["id"])["job_status"] == "SUCCEEDED"
    nan = digits_job("nan", epochs=2)
    nan["training"].update(mode="allreduce", optimizer={"type": "sgd", "learning_rate": 1e30})
    failed = wait_final(svc.client, svc.train(nan)["id"])
    assert (failed["status"], failed["error"]["reason"]) == ("FAILED", "NAN_LOSS")
    _conflict(svc, failed["id"])
    assert svc.client.get(f"/jobs/{finished['id']}").json()["status"] == "SUCCEEDED", "a refused cancel changes nothing"
