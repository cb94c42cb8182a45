"""A real Spark standalone cluster (scripts/cluster.sh: one master, two 1-core workers, each with one stand-in GPU)
and sparktrain drivers started against it as separate processes, as operators run them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import free_port

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = REPO / "scripts" / "cluster.sh"


@dataclass(frozen=True)
class Cluster:
    url: str
    state: Path
    """``scripts/cluster.sh``'s directory (``--dir``): its pid files, recovery state and logs."""


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    state = tmp_path_factory.mktemp("cluster")
    port = int(os.environ.get("SPARKTRAIN_TEST_CLUSTER_PORT") or free_port())  # a port of one's own on a shared machine
    start = [str(CLUSTER_SCRIPT), "start", "--port", str(port), "--dir", str(state), "--memory", "2g",
             "--fake-gpus", "2"]  # fmt: skip
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run(start, check=True, timeout=240, env=env)
    try:
        yield Cluster(f"spark://127.0.0.1:{port}", state)
    finally:
        subprocess.run([str(CLUSTER_SCRIPT), "stop", "--dir", str(state)], check=False, timeout=120, env=env)


@pytest.fixture(scope="session")
def standalone_master(standalone_cluster: Cluster) -> str:
    return standalone_cluster.url


@pytest.fixture(scope="session")
def executor_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Python for the executors with the project's third-party libraries but not sparktrain: a venv whose one
    .pth file adds this environment's site-packages as a plain path (the editable install's own .pth files are
    not processed there), so executors can only run sparktrain code the driver ships them."""
    import sysconfig

    venv = tmp_path_factory.mktemp("executor-venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    Path(site, "sparktrain-libraries.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run([str(python), "-c", "import torch, xgboost, pyspark; import workers"], cwd=venv,
                           capture_output=True, text=True, check=False)  # fmt: skip
    assert "No module named 'workers'" in probe.stderr, probe.stderr
    return str(python)


@contextmanager
def cluster_driver(master: str, work: Path, executor_python: str, **env: str) -> Iterator[httpx.Client]:
    """``python -m app`` as its own process with the cluster as its master; its executors run in the workers'
    directories, so nothing can lean on the driver's working directory."""
    port = free_port()
    data = work / "data"
    data.mkdir(parents=True, exist_ok=True)
    spark_conf = {"spark.ui.enabled": "false", "spark.executor.cores": "1", "spark.executor.memory": "2g",
                  "spark.cores.max": "2", **json.loads(env.pop("SPARK_CONF", "{}"))}  # fmt: skip
    values = {
        **os.environ,
        "SPARKTRAIN_VAR_DIR": str(work / "var"),
        "SPARKTRAIN_SPARK_MASTER": master,
        "SPARKTRAIN_SPARK_CONF": json.dumps(spark_conf),
        "SPARKTRAIN_DATA_ROOTS": f"{REPO / 'datasets'},{data}",
        "SPARKTRAIN_ARTIFACT_STORE": (work / "store").as_uri(),
        "PYSPARK_PYTHON": executor_python,
        **env,
    }
    log = (work / "driver.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "app", "--port", str(port)], cwd=REPO, env=values, stdout=log,
                            stderr=subprocess.STDOUT)  # fmt: skip
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (work / "driver.log").read_text()[-3000:]
            try:
                if client.get("/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the driver did not become ready"
            time.sleep(0.5)
        # Executors register a moment after the application starts.
        while len([e for e in client.get("/cluster").json()["executors"] if e["id"] != "driver"]) < 2:
            assert time.monotonic() < deadline, client.get("/cluster").json()
            time.sleep(0.5)
        yield client
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        client.close()
        log.close()


def executor_pids(app_id: str) -> list[int]:
    """The executor JVMs of ``app_id`` on this machine (the workers start them with ``--app-id``)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            command = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in command and app_id.encode() in command:
            found.append(int(entry))
    return found


def finish(client: httpx.Client, path: str, body: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    deadline = time.monotonic() + timeout
    while (job := client.get(f"/jobs/{job_id}").json())["status"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
        assert time.monotonic() < deadline, job
        time.sleep(0.5)
    return dict(job)
