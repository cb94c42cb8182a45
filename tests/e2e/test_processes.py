"""The real entry points as separate processes: ``python -m app`` and ``celery -A app.jobs.worker worker``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.spark.session import SPARK_LOST_EXIT
from tests.helpers import free_port, taxi_request

REPO = Path(__file__).resolve().parents[2]


def _env(**values: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKTRAIN_")}
    env.update(values)
    return env


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the driver exited with {proc.returncode}"
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError("the driver did not become ready")


def _wait_job(client: httpx.Client, job_id: str, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = dict(client.get(f"/jobs/{job_id}").json())
        if job["status"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not finish")


@pytest.mark.slow
def test_python_m_app_runs_jobs_on_one_spark_application(tmp_path: Path) -> None:
    port = free_port()
    env = _env(
        SPARKTRAIN_VAR_DIR=str(tmp_path / "var"),
        SPARKTRAIN_SPARK_MASTER="local[2]",
        SPARKTRAIN_SPARK_CONF=json.dumps({"spark.ui.enabled": "false"}),
    )
    log = (tmp_path / "driver.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "--port", str(port)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, proc)
        with httpx.Client(base_url=url, timeout=60) as client:
            first = client.post("/train", json=taxi_request("entry"))
            assert first.status_code == 202 and first.headers["location"] == f"/jobs/{first.json()['id']}"
            one = _wait_job(client, first.json()["id"])
            two = _wait_job(client, client.post("/train", json=taxi_request("entry")).json()["id"])
            assert (one["status"], two["status"]) == ("SUCCEEDED", "SUCCEEDED"), (one["error"], two["error"])
            cluster = client.get("/cluster").json()
            assert one["spark_app_id"] == two["spark_app_id"] == cluster["app_id"]
            assert cluster["driver"]["pid"] == proc.pid
        assert (tmp_path / "var" / "sparktrain.db").exists() and (tmp_path / "var" / "broker.db").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        log.close()
    output = (tmp_path / "driver.log").read_text()
    # uvicorn shuts down gracefully, then re-raises the signal so the exit status reports it
    assert code in (0, -signal.SIGTERM), output[-3000:]
    assert "Application shutdown complete" in output


@contextlib.contextmanager
def _external_worker(pg_url: str, redis_url: str, queue: str, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``celery -A app.jobs.worker worker`` on ``queue`` (its output in ``tmp_path/worker.log``), stopped with
    SIGTERM when the block ends unless it exited already."""
    env = _env(
        SPARKTRAIN_DATABASE_URL=pg_url,
        SPARKTRAIN_BROKER_URL=redis_url,
        SPARKTRAIN_QUEUE=queue,
        SPARKTRAIN_VAR_DIR=str(tmp_path / "worker-var"),
        SPARKTRAIN_ARTIFACT_ROOT=str(tmp_path / "artifacts"),
        SPARKTRAIN_SPARK_MASTER="local[1]",
        SPARKTRAIN_SPARK_CONF=json.dumps({"spark.ui.enabled": "false"}),
    )
    command = [sys.executable, "-m", "celery", "-A", "app.jobs.worker", "worker", "-Q", queue, "-n", "ext@%h",
               "--loglevel", "INFO"]  # fmt: skip
    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            yield worker
        finally:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(90)
            except subprocess.TimeoutExpired:
                worker.kill()


@contextlib.contextmanager
def _api_and_worker(
    make_service: Callable[..., Any], pg_url: str, redis_url: str, tmp_path: Path, name: str
) -> Iterator[tuple[Any, subprocess.Popen[bytes]]]:
    """A service that consumes nothing, and an external worker on its queue (a queue of this test's own)."""
    queue = f"{name}-{os.getpid()}-{int(time.time())}"
    with (
        make_service(database_url=pg_url, broker_url=redis_url, queue=queue, in_process_consumer=False) as svc,
        _external_worker(pg_url, redis_url, queue, tmp_path) as worker,
    ):
        yield svc, worker


@pytest.mark.slow
def test_external_celery_worker_runs_the_jobs(
    make_service: Callable[..., Any], pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    with _api_and_worker(make_service, pg_url, redis_url, tmp_path, "ext") as (svc, worker):
        job = _wait_job(svc.client, svc.train(taxi_request("external"))["id"])
        assert job["status"] == "SUCCEEDED", job["error"]
        assert job["worker_id"].split(":")[1] == str(worker.pid)
        assert job["spark_app_id"] != svc.client.get("/cluster").json()["app_id"]
        assert job["model"] == {"name": "external", "version": 1}
    output = (tmp_path / "worker.log").read_text()
    assert "Warm shutdown" in output, output[-3000:]


@pytest.mark.slow
def test_an_external_worker_whose_jvm_died_hands_its_job_back_and_exits_4(
    make_service: Callable[..., Any], pg_url: str, redis_url: str, tmp_path: Path
) -> None:
    # it stayed up, and its consumer kept taking jobs only to hand each back at once (app/jobs/worker.py)
    from bench.chaos import digits_job
    from bench.processes import cmdline, descendants
    from tests.e2e.test_clean_stop import _wait_running

    with _api_and_worker(make_service, pg_url, redis_url, tmp_path, "ext-jvm") as (svc, worker):
        job_id = svc.train(digits_job("ext-jvm", epochs=6, units=64, batch=2, workers=1))["id"]
        _wait_running(svc, job_id, progress=0.1)
        [jvm] = [p for p in descendants(worker.pid) if "org.apache.spark" in cmdline(p) and "java" in cmdline(p)]
        os.kill(jvm, signal.SIGKILL)
        status = worker.wait(120)
        job = svc.client.get(f"/jobs/{job_id}").json()
    output = (tmp_path / "worker.log").read_text(errors="replace")
    assert status == SPARK_LOST_EXIT and "Spark's JVM is gone" in output, output[-3000:]
    assert job["status"] == "QUEUED", job  # handed back: the next driver on the queue runs it
    assert job["attempts"][0]["error_reason"] in ("DRIVER_STOPPED", "DRIVER_LOST"), job["attempts"]


def test_api_import_path_stays_light() -> None:
    """The API imports no torch or xgboost (they load on the jobs that need them), and nothing runs at import."""
    code = (
        "import sys, app.main, app.runtime, app.api.routes.train, app.jobs.celery_app, app.jobs.worker;"
        "heavy = [m for m in ('torch', 'xgboost', 'pyspark.ml', 'sklearn') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"imported on the API path: {out.stdout}"
