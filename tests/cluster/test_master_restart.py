"""A standalone master that dies and is started again (``scripts/cluster.sh master``) takes back its workers and the
driver's application from its recovery directory (Spark's FILESYSTEM recovery mode): the driver keeps its
executors, is given a new one when one dies, and its jobs run. Before, a restarted master knew nothing of the
application, and a driver whose executors went stayed without any until it was restarted."""

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

from tests.cluster.conftest import CLUSTER_SCRIPT, cluster_driver, executor_pids, finish
from tests.helpers import TAXI_FEATURES, free_port

pytestmark = pytest.mark.slow


def _master(port: int) -> dict[str, Any]:
    """The master's state, from its web UI's JSON (port + 1)."""
    return dict(httpx.get(f"http://127.0.0.1:{port + 1}/json/", timeout=5).json())


def _executors(client: httpx.Client) -> set[str]:
    return {e["id"] for e in client.get("/cluster").json()["executors"] if e["id"] != "driver"}


def _wait(what: str, check: Any, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
        except httpx.HTTPError:  # the master's UI is not up yet
            found = None
        if found:
            return found
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s"
        time.sleep(0.5)


def test_a_restarted_master_takes_the_drivers_application_back(tmp_path: Path, executor_python: str) -> None:
    state, port = tmp_path / "a cluster", free_port()  # a space in its path: the recovery option is quoted
    env = {**os.environ, "PYTHON": sys.executable}
    script = [str(CLUSTER_SCRIPT)]
    subprocess.run([*script, "start", "--port", str(port), "--dir", str(state), "--memory", "1g"], check=True,
                   timeout=240, env=env)  # fmt: skip
    try:
        spark_conf = json.dumps({"spark.executor.memory": "1g"})
        with cluster_driver(f"spark://127.0.0.1:{port}", tmp_path / "driver", executor_python,
                            SPARK_CONF=spark_conf) as client:  # fmt: skip
            (app,) = [a["id"] for a in _master(port)["activeapps"]]
            before = _executors(client)
            master_pid = int((state / "master.pid").read_text())
            twice = subprocess.run([*script, "master", "--port", str(port), "--dir", str(state)], env=env,
                                   capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
            assert twice.returncode == 1 and f"the master of {state} runs ({master_pid})" in twice.stderr, twice
            os.kill(master_pid, signal.SIGKILL)
            _wait("the master gone", lambda: not Path(f"/proc/{master_pid}").exists())
            answer = subprocess.run([*script, "master", "--dir", str(state)], env=env,  # on the port it had
                                    capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
            assert answer.returncode == 0, answer.stderr
            assert "takes back its workers and applications" in answer.stdout

            def recovered() -> bool:
                seen = _master(port)
                return (
                    seen["status"] == "ALIVE"
                    and seen["aliveworkers"] == 2
                    and [a["id"] for a in seen["activeapps"]] == [app]
                )

            _wait("the restarted master recovered the workers and the driver's application", recovered)
            assert _executors(client) == before, "the driver kept its executors"

            # an executor dies: the restarted master gives the application a new one (it would not know the app)
            pids = executor_pids(app)
            assert len(pids) == 2, pids
            os.kill(pids[0], signal.SIGKILL)

            def replaced() -> bool:  # registered with its block manager, and counted as a task slot again
                seen = client.get("/cluster").json()
                executors = [e for e in seen["executors"] if e["id"] != "driver"]
                ids = {e["id"] for e in executors}
                return (
                    len(ids) == 2
                    and ids != before
                    and seen["task_slots"] == 2
                    and all(e["max_memory_bytes"] > 0 for e in executors)
                )

            _wait("a new executor", replaced)

            body = {
                "name": "after-master-restart",
                "framework": "xgboost",
                "dataset": {"uri": "taxi/train.parquet", "features": TAXI_FEATURES, "label": "fare_amount",
                            "task": "regression"},
                "params": {"max_depth": 4, "num_round": 10, "num_workers": 2},
            }  # fmt: skip
            job = finish(client, "/train", body)
            assert job["status"] == "SUCCEEDED", job["error"]
            assert client.get("/readyz").status_code == 200
    finally:
        stopped = subprocess.run([*script, "stop", "--dir", str(state)], env=env, capture_output=True, text=True,
                                 timeout=120, check=False)  # fmt: skip
        assert not (state / "recovery").exists(), stopped.stdout
