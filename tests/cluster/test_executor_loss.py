"""Executors lost and killed on a real standalone cluster, with Spark's default 1g executor heap (walkthrough on a
standalone cluster, 2026-12-07):

- a cancel during "checking the executors" crashed the executors whose check task waited in Spark's ``allGather``
  for a slower one (exit code 50);
- every xgboost job's validation predictions allocated ~1 GB per task and killed executors (exit code 52), which
  Spark hid by running the tasks again;
- a torch job whose ``num_workers`` is every task slot failed for good when it lost an executor: its retry was
  taken before the replacement registered and found a slot short (``INVALID_REQUEST``); it waits for it now.

The executors' Python starts through a ``sitecustomize`` of the test's (``_HOLD``): once armed, the first Python
process an executor starts (its pyspark daemon) waits until the test lets it go, so one executor's task of a barrier
stage runs while the other's cannot start yet, as with a cold executor beside a warm one.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cluster.conftest import cluster_driver, executor_pids, finish
from tests.helpers import TAXI_FEATURES

pytestmark = pytest.mark.slow

_HOLD = """
import os, time
_hold = os.environ.get("SPARKTRAIN_TEST_HOLD", "")
if _hold and os.path.exists(os.path.join(_hold, "armed")):
    try:
        os.close(os.open(os.path.join(_hold, "held"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        open(os.path.join(_hold, "second-%d" % os.getpid()), "w").close()
    else:
        _until = time.monotonic() + 300
        while not os.path.exists(os.path.join(_hold, "released")) and time.monotonic() < _until:
            time.sleep(0.1)
"""

XGBOOST = {
    "framework": "xgboost",
    "dataset": {"uri": "taxi/train.parquet", "features": TAXI_FEATURES, "label": "fare_amount", "task": "regression"},
    "validation": {"uri": "taxi/eval.parquet"},
    "params": {"max_depth": 4, "num_round": 20, "num_workers": 2},
}
CNN = {
    "framework": "torch",
    "dataset": {"uri": "digits/train.parquet", "features": ["pixels"], "label": "label", "task": "classification",
                "num_classes": 10},
    "validation": {"uri": "digits/test.parquet"},
    "network": {"input_shape": [1, 8, 8], "layers": [
        {"type": "conv2d", "filters": 8, "kernel_size": 3, "padding": 1, "activation": "relu"},
        {"type": "flatten"},
        {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}]},
    "training": {"epochs": 40, "batch_size_per_worker": 32, "num_workers": 2, "seed": 7,
                 "optimizer": {"type": "adam", "learning_rate": 0.003}, "mode": "gradient_sharing"},
}  # fmt: skip


@pytest.fixture(scope="module")
def hold(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("hold")
    (where / "site").mkdir()
    (where / "site" / "sitecustomize.py").write_text(_HOLD)
    return where


@pytest.fixture(scope="module")
def driver(
    standalone_master: str, executor_python: str, hold: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpx.Client]:
    conf = {"spark.executor.memory": "1g", "spark.executorEnv.PYTHONPATH": str(hold / "site"),
            "spark.executorEnv.SPARKTRAIN_TEST_HOLD": str(hold)}  # fmt: skip
    work = tmp_path_factory.mktemp("loss-driver")
    # a retry that waits for the retry delay is sent by the reconciler's next pass: both short here
    with cluster_driver(standalone_master, work, executor_python, SPARK_CONF=json.dumps(conf),
                        SPARKTRAIN_RETRY_DELAY_S="2", SPARKTRAIN_RECONCILE_INTERVAL_S="2") as client:  # fmt: skip
        yield client


def _executors(client: httpx.Client) -> set[str]:
    return {e["id"] for e in client.get("/cluster").json()["executors"] if e["id"] != "driver"}


def _idle(client: httpx.Client) -> bool:
    return all(e["active_tasks"] == 0 for e in client.get("/cluster").json()["executors"])


def _wait(what: str, check: Callable[[], Any], timeout: float = 300) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s"
        time.sleep(0.5)
    return found


def _lines(client: httpx.Client, job_id: str) -> list[str]:
    return [line["message"] for line in client.get(f"/jobs/{job_id}/logs").json()["lines"]]


def test_a_cancel_during_the_executor_check_leaves_the_executors_alive(driver: httpx.Client, hold: Path) -> None:
    before = _executors(driver)
    (hold / "armed").touch()  # the first of the two executors' Python daemons waits
    response = driver.post("/train", json={**XGBOOST, "name": "cancel-during-check"})
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    try:
        _wait("one executor's Python held, the other's started", lambda: list(hold.glob("second-*")))
        job = driver.get(f"/jobs/{job_id}").json()
        assert job["progress_message"] == "checking the executors", job
        time.sleep(5)  # the started one's check task runs (with allGather it waited there for the held one)
        assert driver.post(f"/jobs/{job_id}/cancel").status_code == 202
        done = _wait("the job cancelled", lambda: (j := driver.get(f"/jobs/{job_id}").json())["status"] not in
                     ("QUEUED", "STARTING", "RUNNING", "CANCELLING") and j)  # fmt: skip
        assert done["status"] == "CANCELLED", done
    finally:
        (hold / "released").touch()
    _wait("the check's tasks ended", lambda: _idle(driver))
    assert _executors(driver) == before, "no executor died of the cancel"
    warnings = [line for line in _lines(driver, job_id) if "was lost while the job ran" in line]
    assert warnings == [], warnings


def test_xgboost_on_spark_default_executor_heap_loses_no_executor(driver: httpx.Client) -> None:
    before = _executors(driver)
    job = finish(driver, "/train", {**XGBOOST, "name": "xgb-1g"})
    assert job["status"] == "SUCCEEDED", job["error"]
    assert job["result"]["validation"]["rmse"] < 3.0
    assert _executors(driver) == before, "an executor died (exit code 52: out of heap) and was replaced"
    lost = [line for line in _lines(driver, job["id"]) if "was lost while the job ran" in line]
    assert lost == [], lost


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_job_on_every_slot_that_loses_an_executor_waits_for_its_replacement_and_resumes(
    driver: httpx.Client,
) -> None:
    """The worker of the executor that is killed is paused first (SIGSTOP), so that it starts no replacement until
    the test lets it go on: the retry finds a slot short however fast a replacement would register, and must wait.
    (Killing the master instead made it reuse the dead executor's id when it came back, and Spark then fetched
    shuffle blocks from the dead executor.)"""
    app = driver.get("/cluster").json()["app_id"]
    response = driver.post("/train", json={**CNN, "name": "cnn-executor-lost"})
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]

    def training_past_epoch_4() -> bool:
        message = str(driver.get(f"/jobs/{job_id}").json()["progress_message"] or "")
        return message.startswith("epoch ") and int(message.split()[1]) > 4

    _wait("the job trains past its fourth epoch (checkpointed)", training_past_epoch_4)
    pids = executor_pids(app)
    assert len(pids) == 2, pids
    worker = _parent(pids[0])
    os.kill(worker, signal.SIGSTOP)  # for less than the master's 60 s worker timeout
    try:
        os.kill(pids[0], signal.SIGKILL)
        waiting = "waiting for 2 task slots, 1 now: an executor was lost, Spark is replacing it"
        _wait("the retry waits for its slots", lambda: driver.get(f"/jobs/{job_id}").json()["progress_message"] ==
              waiting, timeout=45)  # fmt: skip
    finally:
        os.kill(worker, signal.SIGCONT)
    job = _wait("the job ends", lambda: (j := driver.get(f"/jobs/{job_id}").json())["status"] in
                ("SUCCEEDED", "FAILED", "CANCELLED") and j, timeout=600)  # fmt: skip
    assert job["status"] == "SUCCEEDED", job["error"]
    # attempt 2 waits for its slots; or, when a surviving rank's error ended attempt 1 before Spark had removed the
    # dead executor, attempt 2 counted its slot, Spark refused its barrier stage (NO_EXECUTORS) and attempt 3 waits
    reasons = [a["error_reason"] for a in job["attempts"][:-1]]
    assert reasons in (["WORKER_LOST"], ["WORKER_LOST", "NO_EXECUTORS"]), job["attempts"]
    assert job["max_attempts"] == 4, "it saved progress first: the retry after the loss cost no attempt"
    lines = _lines(driver, job_id)
    assert any("was lost while the job ran" in line for line in lines), lines
    assert waiting in lines and any(line.startswith("2 task slots after ") for line in lines), lines
    assert any(line.startswith("resuming from checkpoint") for line in lines), lines
    assert job["result"]["validation"]["accuracy"] > 0.85
