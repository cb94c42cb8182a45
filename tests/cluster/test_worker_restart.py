"""A worker that died is started again by ``scripts/cluster.sh worker N``, as the cluster started it (its cores,
memory and stand-in GPUs), and registers with the master; before, nothing could start one worker again short of
stopping the whole cluster (docs/clusters-gpus.md, "An executor or a worker lost")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cluster.conftest import CLUSTER_SCRIPT
from tests.helpers import free_port

pytestmark = pytest.mark.slow


def _alive(port: int) -> list[dict[str, Any]]:
    """The workers the master counts as alive, from its web UI's JSON (port + 1)."""
    workers = httpx.get(f"http://127.0.0.1:{port + 1}/json/", timeout=5).json()["workers"]
    return [w for w in workers if w["state"] == "ALIVE"]


def _wait(what: str, check: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s"
        time.sleep(0.5)


def test_a_dead_worker_is_started_again_as_it_was(tmp_path: Path) -> None:
    state, port = tmp_path / "cluster", free_port()
    env = {**os.environ, "PYTHON": sys.executable}
    script = [str(CLUSTER_SCRIPT)]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*script, *args, "--dir", str(state)], env=env, capture_output=True, text=True,
                              timeout=240, check=False)  # fmt: skip

    started = subprocess.run([*script, "start", "--port", str(port), "--dir", str(state), "--memory", "1g",
                              "--fake-gpus", "2"], env=env, timeout=240, check=False)  # fmt: skip
    assert started.returncode == 0
    try:
        first = int((state / "worker-1.pid").read_text())
        running = run("worker", "1")
        assert running.returncode == 1 and f"worker 1 of {state} runs ({first})" in running.stderr, running
        assert run("worker", "3").returncode == 1 and run("worker", "x").returncode == 2

        os.kill(first, signal.SIGKILL)
        _wait("the master saw worker 1 go", lambda: len(_alive(port)) == 1)
        answer = run("worker", "1")
        assert answer.returncode == 0, answer.stderr
        again = int((state / "worker-1.pid").read_text())
        assert again != first and f"worker 1 started again ({again}): 1 core, 1g" in answer.stdout, answer.stdout
        alive = _alive(port)
        assert len(alive) == 2, alive
        # as it was started: 1 core, 1g, and its own stand-in GPU (worker 2 has the other)
        assert sorted((w["cores"], w["memory"]) for w in alive) == [(1, 1024), (1, 1024)], alive
        gpus = sorted(a for w in alive for a in w["resources"]["gpu"]["addresses"])
        assert gpus == ["0", "1"], alive
        assert "worker-1: running" in run("status").stdout
    finally:
        run("stop")
