"""A tune job whose driver is killed with SIGKILL in the middle of its study finishes on the next driver: the
reconciler retries it like any job, the finished trial is never run again, the running trial resumes from its
checkpoint as any training job does (attempt 2), new trials take the next numbers, and the leaderboard ends with
exactly ``trials`` entries, one training job and one model version per trial."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from bench.chaos import digits_job
from bench.processes import Driver, driver_env
from tests.e2e.chaos_support import log_lines, wait_final

pytestmark = pytest.mark.slow


def _trials(driver: Driver, tune_id: str) -> dict[int, dict[str, Any]]:
    items = driver.client.get("/jobs", params={"type": "train", "limit": 500}).json()["items"]
    return {j["trial"]: j for j in items if j["parent_id"] == tune_id}


def test_a_killed_tune_job_finishes_on_the_next_driver_without_running_a_trial_twice(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env = driver_env(tmp_path, heartbeat_stale_s="3", reconcile_interval_s="1", consumer_concurrency="2")
    started: list[Driver] = []
    request.addfinalizer(lambda: [d.stop() for d in started])
    first = Driver(env, tmp_path / "first.log")
    started.append(first.start())
    # grid order is the listed order: a short trial, a long one (killed in the middle), a short one; batch 4 gives
    # the long one seconds of training (at batch 256 its ten epochs took a fraction of a second: a late kill)
    body = {"name": "tune-killed", "base": digits_job("tune-killed", epochs=1, units=8, batch=4, workers=1),
            "space": {"training.epochs": {"type": "choice", "values": [1, 10, 2]}}, "sampler": "grid",
            "trials": 3, "parallel": 1, "metric": "accuracy"}  # fmt: skip
    response = first.client.post("/tune", json=body)
    assert response.status_code == 202, response.text
    tune_id = response.json()["id"]
    deadline = time.monotonic() + 300
    while True:
        trials = _trials(first, tune_id)
        if 1 in trials and first.client.get(f"/jobs/{trials[1]['id']}/checkpoints").json()["checkpoints"]:
            break
        assert first.client.get(f"/jobs/{tune_id}").json()["status"] in ("QUEUED", "STARTING", "RUNNING")
        assert time.monotonic() < deadline, f"the long trial never wrote a checkpoint: {trials}"
        time.sleep(0.2)
    assert first.client.get(f"/jobs/{trials[0]['id']}").json()["status"] == "SUCCEEDED"
    assert first.client.get(f"/jobs/{trials[1]['id']}").json()["status"] == "RUNNING", "it ended before the kill"
    first.kill()

    second = Driver(env, tmp_path / "second.log")
    started.append(second.start())
    tune = wait_final(second.client, tune_id, timeout=300)
    assert tune["status"] == "SUCCEEDED", (tune["error"], second.tail())
    assert tune["attempt"] == 2 and tune["attempts"][0]["error_reason"] == "DRIVER_LOST"
    board = tune["result"]["leaderboard"]
    assert sorted(r["trial"] for r in board) == [0, 1, 2] and all(r["state"] == "COMPLETE" for r in board), board
    assert {r["trial"]: r["epochs"] for r in board} == {0: 1, 1: 10, 2: 2}
    assert any(line.startswith("resumed the study: 1 trials finished, 1 attached to")
               for line in log_lines(second.client, tune_id))  # fmt: skip

    trials = _trials(second, tune_id)
    assert sorted(trials) == [0, 1, 2]
    assert {r["trial"]: r["job_id"] for r in board} == {n: j["id"] for n, j in trials.items()}
    assert trials[0]["attempt"] == 1 and trials[2]["attempt"] == 1, "a finished trial never runs again"
    assert trials[1]["attempt"] == 2 and trials[1]["attempts"][0]["error_reason"] == "DRIVER_LOST"
    for trial in trials.values():
        starts = [line for line in log_lines(second.client, trial["id"]) if line.startswith("attempt ")]
        numbers = [line.split()[1] for line in starts if " started on " in line]
        assert len(numbers) == len(set(numbers)) == trial["attempt"], (trial["trial"], starts)
    versions = [v for m in second.client.get("/models").json()["items"] if m["name"] == "tune-killed"
                for v in m["versions"]]  # fmt: skip
    assert sorted(v["job_id"] for v in versions) == sorted(j["id"] for j in trials.values())
