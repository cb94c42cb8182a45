"""What several benchmarks share: a free port, the service as a subprocess, waiting for it and for its jobs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]


SETTLE_S = 1.0


def settle() -> None:
    """A pause between two measured runs. Back to back, a run started while the last one's Python workers were still
    freeing its tensors, and came out 0.1 to 0.3 s slower than after a pause (``bench.data``: whichever path ran
    second in a round was the slower one; ``bench.network``: the first job of a mode right after another job paid
    0.5 to 2 s before its stage started). A first job on new data does not start within milliseconds of another
    one's end."""
    time.sleep(SETTLE_S)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()


def start_service(work: Path, port: int, **env: str) -> subprocess.Popen[bytes]:
    """``python -m app`` on the embedded default under ``work``, Spark local[2], the UI off."""
    values = {
        **os.environ,
        "SPARKTRAIN_VAR_DIR": str(work / "var"),
        "SPARKTRAIN_SPARK_MASTER": "local[2]",
        "SPARKTRAIN_SPARK_CONF": '{"spark.ui.enabled":"false"}',
        "SPARKTRAIN_LOG_LEVEL": "WARNING",
        **env,
    }
    return subprocess.Popen([sys.executable, "-m", "app", "--port", str(port)], cwd=REPO, env=values,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def run_job(client: httpx.Client, path: str, body: dict[str, Any], poll_s: float = 0.2) -> tuple[dict[str, Any], float]:
    """POST a job, poll it to the end; returns the job and the wall seconds from the POST to the final state."""
    start = time.perf_counter()
    response = client.post(path, json=body)
    if response.status_code != 202:
        raise RuntimeError(f"{path}: {response.status_code} {response.text}")
    job = response.json()
    while (job := client.get(f"/jobs/{job['id']}").json())["status"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
        time.sleep(poll_s)
    elapsed = time.perf_counter() - start
    if job["status"] != "SUCCEEDED":
        raise RuntimeError(f"job {job['id']} {job['status']}: {job.get('error')}")
    return job, elapsed


def save_results(name: str, results: dict[str, Any], *, quick: bool) -> Path:
    """Write a benchmark's results where bench/README.md cites them: ``bench/results/<name>.json``, or
    ``bench/results/tmp/<name>-quick.json`` for a quick run, with the time and the load averages at the end (the
    machine is shared). Benchmarks that only printed their JSON left their saved file stale."""
    import json

    target = REPO / "bench" / "results" / ("tmp" if quick else "") / (f"{name}-quick.json" if quick else f"{name}.json")
    target.parent.mkdir(parents=True, exist_ok=True)
    ended = {"saved_at": time.strftime("%Y-%m-%d %H:%M"), "load_average_end": [round(x, 2) for x in os.getloadavg()]}
    target.write_text(json.dumps({**results, **ended}, indent=1) + "\n")
    print(f"saved {target.relative_to(REPO)}")
    return target
