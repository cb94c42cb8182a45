"""Stopping the service never fails a job: SIGINT or SIGTERM sent to the whole process group of a running
``python -m app`` (as Ctrl-C in a terminal, systemd's default stop or ``docker stop`` under an init that signals the
group do: Spark's JVM gets the signal too) while a job runs. The driver stops taking jobs, hands the running one
back at once (its attempt ends DRIVER_STOPPED, it is QUEUED again, and the stop cost it no attempt), and exits
with status 0 and no traceback; the next start of the driver finishes the job. A second signal exits at once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from bench.chaos import Driver, alive, descendants, digits_job, driver_env
from tests.e2e.chaos_support import wait_final
from tests.helpers import Service

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
NOISE = ("Traceback", "Application shutdown failed", "clearJobGroup", "Exception in", "ERROR", "Requeuing", "Restoring")


def _wait_running(driver: Driver | Service, job_id: str, progress: float = 0.0, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = driver.client.get(f"/jobs/{job_id}").json()
        if job["status"] == "RUNNING" and job["progress"] > progress:
            return job
        assert job["status"] in ("QUEUED", "STARTING", "RUNNING"), job
        assert time.monotonic() < deadline, f"job {job_id} did not run: {job}"
        time.sleep(0.2)


def _signal_group(driver: Driver, *signals: int, timeout: float = 120) -> int:
    """Send ``signals`` to the driver's process group (it leads its own session), each once the driver said it
    got the one before, and wait for it and every process under it (the JVM, Spark's Python workers) to end;
    returns its exit status."""
    assert driver.proc is not None
    tree = descendants(driver.pid)
    for sig in signals:
        os.killpg(driver.pid, sig)
        deadline = time.monotonic() + 30
        while f"{signal.Signals(sig).name}: stopping" not in driver.tail(100_000) and driver.proc.poll() is None:
            assert time.monotonic() < deadline, "the driver did not say it got the signal"
            time.sleep(0.05)
    status = driver.proc.wait(timeout)
    deadline = time.monotonic() + 60
    while [p for p in tree if alive(p)]:
        assert time.monotonic() < deadline, "processes of the stopped driver still run"
        time.sleep(0.2)
    return status


def _handed_back(job: dict[str, Any]) -> dict[str, Any]:
    assert job["status"] == "QUEUED", job
    assert (job["attempt"], job["max_attempts"]) == (2, 4), "a stop costs the job no attempt"
    first = job["attempts"][0]
    assert (first["attempt"], first["status"], first["error_reason"]) == (1, "FAILED", "DRIVER_STOPPED"), first
    assert job["attempts"][1]["sent"] is True, "its message went back to the broker at once"
    return first


def test_sigterm_to_the_group_hands_the_running_job_back_and_the_next_driver_finishes_it(tmp_path: Path) -> None:
    env = driver_env(tmp_path)
    first = Driver(env, tmp_path / "first.log").start()
    try:
        # batch 2: about a second per epoch, so the signal lands mid-training (at batch 16 the whole job took under
        # a second and could end before it); progress 0.4: in epoch 3, past the first epoch's checkpoint
        job_id = first.client.post("/train", json=digits_job("stop", epochs=6, units=64, batch=2)).json()["id"]
        _wait_running(first, job_id, progress=0.4)
        status = _signal_group(first, signal.SIGTERM)
    finally:
        first.stop()
    log = first.log.read_text(errors="replace")
    assert status == 0, log[-3000:]
    assert not [word for word in NOISE if word in log], log[-5000:]
    assert "handed back" in log
    # uvicorn's lines as every other: time, level and logger (they were "INFO:     ..." without a time)
    assert re.search(r'^\d{4}-\d\d-\d\d [\d:,]+ INFO uvicorn\.access: 127\.0\.0\.1:\d+ - "POST /train HTTP/1\.1" 202',
                     log, re.M), log[:3000]  # fmt: skip
    assert not re.search(r"^INFO: ", log, re.M), log[:3000]

    second = Driver(env, tmp_path / "second.log").start()
    try:
        queued = second.client.get(f"/jobs/{job_id}").json()
        if queued["status"] == "QUEUED":
            _handed_back(queued)
        job = wait_final(second.client, job_id)
        assert job["status"] == "SUCCEEDED", job["error"]
        assert job["attempts"][0]["error_reason"] == "DRIVER_STOPPED" and job["attempt"] == 2
        lines = [line["message"] for line in second.client.get(f"/jobs/{job_id}/logs").json()["lines"]]
        assert any(line.startswith("resuming from checkpoint") for line in lines), lines
    finally:
        second.stop()


def test_a_stop_on_redis_logs_no_warning_but_its_own(tmp_path: Path, redis_url: str) -> None:
    """On a Redis broker the stop also printed kombu's "WARNING kombu.transport.virtual.base: Requeuing undeliverable
    message for queue '...': No consumers.": the job's new message, sent as the job was handed back, came back from
    the consumer's poll of Redis in flight after the consumer had stopped consuming, and kombu put it back on the
    queue. Nothing was lost (app/core/logging.py keeps the line at INFO); the stop's warnings are sparktrain's own."""
    env = driver_env(tmp_path, broker_url=redis_url, queue=f"stop-{uuid.uuid4().hex[:8]}")
    driver = Driver(env, tmp_path / "driver.log").start()
    try:
        job_id = driver.client.post("/train", json=digits_job("stop-redis", epochs=6, units=64, batch=2)).json()["id"]
        _wait_running(driver, job_id, progress=0.2)  # one job: the consumer has a free slot, so it polls Redis
        status = _signal_group(driver, signal.SIGTERM)
    finally:
        driver.stop()
    log = driver.log.read_text(errors="replace")
    assert status == 0, log[-3000:]
    assert not [word for word in NOISE if word in log], log[-5000:]
    loud = [line for line in log.splitlines() if re.match(r"\S+ \S+ (WARNING|ERROR|CRITICAL) (?!sparktrain)", line)]
    assert loud == [], loud


def test_sigint_during_the_readmes_forest_job_hands_it_back_and_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    env = driver_env(tmp_path)
    body = json.loads((REPO / "examples" / "random-forest-cv.json").read_text())
    driver = Driver(env, tmp_path / "driver.log").start()
    try:
        job_id = driver.client.post("/train", json=body).json()["id"]
        _wait_running(driver, job_id)
        status = _signal_group(driver, signal.SIGINT)
        assert status == 0
        log = driver.log.read_text(errors="replace")
        assert not [word for word in NOISE if word in log], log[-5000:]
    finally:
        driver.stop()

    again = Driver(env, tmp_path / "again.log").start()
    try:
        job = again.client.get(f"/jobs/{job_id}").json()
        assert job["attempts"][0]["error_reason"] == "DRIVER_STOPPED", job
        _wait_running(again, job_id)
        status = _signal_group(again, signal.SIGINT, signal.SIGINT)
    finally:
        again.stop()
    log = again.log.read_text(errors="replace")
    assert status == 0 and "second stop signal: exiting" in log, log[-3000:]
    assert "Traceback" not in log, log[-5000:]
    # the second signal came while the first one's hand-back ran (~0.1 s; Ctrl-C twice): it exited without waiting
    # for it and left the job RUNNING for its heartbeat to go stale (operator walkthrough)
    third = Driver(env, tmp_path / "third.log").start()
    try:
        job = third.client.get(f"/jobs/{job_id}").json()
        assert [a["error_reason"] for a in job["attempts"][:2]] == ["DRIVER_STOPPED", "DRIVER_STOPPED"], job
    finally:
        third.stop()
