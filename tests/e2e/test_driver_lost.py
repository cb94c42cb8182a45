"""A driver killed with SIGKILL in the middle of a training job: the next driver's reconciler fails the job's
attempt with DRIVER_LOST and runs attempt 2 from the newest checkpoint, under the same job id."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import free_port

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def start_driver(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "app", "--port", str(port)], cwd=REPO, env=env,
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    deadline = time.monotonic() + 180
    while True:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if client.get("/readyz").status_code == 200:
                return proc, client
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.3)


def test_killed_driver_job_resumes_from_its_checkpoint_on_the_next_driver(tmp_path: Path) -> None:
    env = {**os.environ, "SPARKTRAIN_VAR_DIR": str(tmp_path / "var"), "SPARKTRAIN_SPARK_MASTER": "local[2]",
           "SPARKTRAIN_SPARK_CONF": json.dumps({"spark.ui.enabled": "false"}),
           "SPARKTRAIN_HEARTBEAT_STALE_S": "3", "SPARKTRAIN_RECONCILE_INTERVAL_S": "1"}  # fmt: skip
    body: dict[str, Any] = {
        "name": "survivor",
        "framework": "torch",
        "dataset": {"uri": "datasets/digits/train.parquet", "features": ["pixels"], "label": "label",
                    "task": "classification", "num_classes": 10},
        "network": {"layers": [{"type": "dense", "units": 256, "activation": "relu"},
                               {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}]},
        "training": {"epochs": 40, "batch_size_per_worker": 16, "num_workers": 2, "seed": 7},
    }  # fmt: skip
    first, client = start_driver(env, tmp_path / "first.log")
    try:
        response = client.post("/train", json=body)
        assert response.status_code == 202, response.text
        job_id = response.json()["id"]
        deadline = time.monotonic() + 240
        while not client.get(f"/jobs/{job_id}/checkpoints").json()["checkpoints"]:
            assert client.get(f"/jobs/{job_id}").json()["status"] in ("QUEUED", "STARTING", "RUNNING")
            assert time.monotonic() < deadline, "no checkpoint was written"
            time.sleep(0.3)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its Spark JVM, mid-training, no goodbye
        first.wait(30)
        client.close()

    second, client = start_driver(env, tmp_path / "second.log")
    try:
        deadline = time.monotonic() + 300
        while (job := client.get(f"/jobs/{job_id}").json())["status"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
            assert time.monotonic() < deadline, job
            time.sleep(0.5)
        assert job["status"] == "SUCCEEDED", (job["error"], (tmp_path / "second.log").read_text()[-3000:])
        assert job["attempt"] == 2
        assert [a["error_reason"] for a in job["attempts"]] == ["DRIVER_LOST"]
        assert (
            job["attempts"][0]["attempt"] == 1 and "stopped sending heartbeats" in job["attempts"][0]["error_message"]
        )
        resumed = job["request"]["training"]["resume_from"]
        checkpoints = client.get(f"/jobs/{job_id}/checkpoints").json()["checkpoints"]
        assert resumed in [c["id"] for c in checkpoints]
        epochs = sorted(c["epoch"] for c in checkpoints)
        assert epochs == sorted(set(epochs)), "no epoch is registered twice"
        assert epochs[-1] == 40
        lines = [line["message"] for line in client.get(f"/jobs/{job_id}/logs").json()["lines"]]
        assert any("attempt 2 queued: resumes from checkpoint" in line for line in lines), lines
        assert any("resuming from checkpoint" in line for line in lines), lines
    finally:
        os.killpg(second.pid, signal.SIGTERM)
        second.wait(60)
        client.close()
