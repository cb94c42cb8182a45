"""What the tests that break things share: a job's model weights, its log, waiting for a checkpoint."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
from safetensors.torch import load_file

FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def model_weights(client: httpx.Client, job: dict[str, Any]) -> dict[str, Any]:
    """The tensors of the model version a finished training job registered."""
    model = job["model"]
    version = client.get(f"/models/{model['name']}/versions/{model['version']}").json()
    return load_file(str(Path(urlparse(version["artifact_uri"]).path) / "weights.safetensors"))


def same_weights(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)


def log_lines(client: httpx.Client, job_id: str) -> list[str]:
    return [line["message"] for line in client.get(f"/jobs/{job_id}/logs", params={"limit": 5000}).json()["lines"]]


def checkpoint_epochs(client: httpx.Client, job_id: str) -> list[int]:
    return [c["epoch"] for c in client.get(f"/jobs/{job_id}/checkpoints").json()["checkpoints"]]


def wait_for_epoch(client: httpx.Client, job_id: str, epoch: int, timeout: float = 300) -> dict[str, Any]:
    """Wait until the job trains epoch ``epoch`` or a later one (the checkpoint of epoch - 1 is registered and the
    job still runs); returns the job. "Or later": an epoch may take less than one poll."""
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = client.get(f"/jobs/{job_id}").json()
        assert job["status"] in ("QUEUED", "STARTING", "RUNNING"), job
        done = checkpoint_epochs(client, job_id)
        if done and max(done) >= epoch - 1 and (job["progress_message"] or "").startswith("epoch "):
            return job
        assert time.monotonic() < deadline, f"job {job_id} never reached epoch {epoch}: {job}"
        time.sleep(0.1)


def wait_final(client: httpx.Client, job_id: str, timeout: float = 600) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job: dict[str, Any] = client.get(f"/jobs/{job_id}").json()
        if job["status"] in FINAL:
            return job
        assert time.monotonic() < deadline, f"job {job_id} did not finish: {job}"
        time.sleep(0.3)
