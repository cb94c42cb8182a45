"""The driver process killed with SIGKILL in the middle of training, twice: once in epoch 2, once while a
checkpoint is being written. Each time the next driver's reconciler fails the lost attempt with DRIVER_LOST and
runs the next one from the newest registered checkpoint, under the same job id, and the job ends with exactly
the weights (and so the accuracy) of an uninterrupted run of the same job: resuming is exact, because the
checkpoint holds the model, each rank's optimizer and residual state and the step, and the data order of every
epoch depends on the seed and the epoch only. A checkpoint caught half-written is never registered nor used, and
the resumed run's publishing of that epoch clears what the dead one left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from bench.chaos import Driver, alive, descendants, digits_job, driver_env, python_workers
from tests.e2e.chaos_support import (
    checkpoint_epochs,
    log_lines,
    model_weights,
    same_weights,
    wait_final,
    wait_for_epoch,
)

pytestmark = pytest.mark.slow


def _catch_a_checkpoint_being_written(driver: Driver, directory: Path, epochs: int, deadline_s: float = 300) -> Path:
    """Watch ``directory`` until a checkpoint after the first is being written (an ``epoch-<n>.partial-*``
    directory whose epoch has no final directory yet), freeze the Spark Python workers (SIGSTOP), and if the write
    is still unfinished SIGKILL the driver and every process under it at once; else let them go on and wait for
    the next epoch. Returns the unfinished directory."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            names = []
        partial = [n for n in names if ".partial" in n and n.split(".")[0] not in names and "epoch-1" in names]
        assert f"epoch-{epochs}" not in names, "training ended before a checkpoint was caught being written"
        if not partial:
            time.sleep(0.0005)
            continue
        workers = python_workers(driver.pid)
        _signal(workers, signal.SIGSTOP)
        while any(_state(pid) not in ("T", "Z", "") for pid in workers):  # stopped (or gone) before we look
            time.sleep(0.0005)
        caught = directory / partial[0]
        if caught.exists() and not (directory / partial[0].split(".")[0]).exists():
            tree = [driver.pid, *descendants(driver.pid)]
            _signal(tree, signal.SIGKILL)
            assert driver.proc is not None
            driver.proc.wait(30)
            while [p for p in tree if alive(p)]:
                time.sleep(0.1)
            return caught
        _signal(workers, signal.SIGCONT)
        while caught.exists():  # this one was published meanwhile: wait for the next epoch
            time.sleep(0.001)
    raise AssertionError("no checkpoint was caught while being written")


def _signal(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _state(pid: int) -> str:
    """The process's state letter (``T``: stopped), or "" once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat[stat.rindex(")") + 2]


def _registered(var: Path, job_id: str) -> dict[int, str]:
    """epoch -> id of the job's checkpoints in the (SQLite) database, read while no driver runs."""
    with sqlite3.connect(var / "sparktrain.db") as db:
        return dict(db.execute("SELECT epoch, id FROM checkpoints WHERE job_id = ?", (job_id,)).fetchall())


def _resumed_as_attempt_2(driver: Driver, job_id: str, before: dict[int, str]) -> dict[str, Any]:
    """The job finished SUCCEEDED in attempt 2, resumed from the newest of the checkpoints ``before`` (those
    registered when its driver was killed)."""
    job = wait_final(driver.client, job_id)
    assert job["status"] == "SUCCEEDED", (job["error"], driver.tail())
    assert job["attempt"] == 2
    lost = job["attempts"][0]
    assert (lost["attempt"], lost["error_reason"]) == (1, "DRIVER_LOST")
    assert "stopped sending heartbeats" in lost["error_message"]
    assert job["request"]["training"]["resume_from"] == before[max(before)]
    checkpoints = driver.client.get(f"/jobs/{job_id}/checkpoints").json()["checkpoints"]
    epochs = [c["epoch"] for c in checkpoints]
    assert len(epochs) == len(set(epochs)), "no epoch is registered twice"
    assert all(c["attempt"] == 2 for c in checkpoints if c["epoch"] > max(before))
    lines = log_lines(driver.client, job_id)
    assert [line.split(" on ")[0] for line in lines if " started on " in line] == ["attempt 1 started",
                                                                                 "attempt 2 started"]  # fmt: skip
    assert any(line.startswith(f"resuming from checkpoint {before[max(before)]}") for line in lines), lines
    return job


def test_a_killed_driver_resumes_its_job_from_the_checkpoint_like_an_uninterrupted_run(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    env = driver_env(tmp_path, heartbeat_stale_s="3", reconcile_interval_s="1", checkpoint_retention="3")
    # batch 2: about a second per epoch, so the kill lands mid-training (at batch 16 an epoch took 0.16 s and the job
    # could finish between noticing epoch 2 and the kill)
    survivor = digits_job("survivor", epochs=4, units=256, batch=2)
    # ~2.5 million parameters: each rank writes ~30 MB per checkpoint, long enough to be caught at it
    big = digits_job("big", epochs=4, units=1536, batch=32)
    big["network"]["layers"].insert(1, {"type": "dense", "units": 1536, "activation": "relu"})

    started: list[Driver] = []
    request.addfinalizer(lambda: [d.stop() for d in started])  # also when an assertion fails midway

    first = Driver(env, tmp_path / "first.log")
    started.append(first.start())
    a = first.client.post("/train", json=survivor).json()["id"]
    wait_for_epoch(first.client, a, 2)
    first.kill()  # SIGKILL of the driver process alone; its JVM and Python workers follow it (kill() waits)
    before_a = _registered(tmp_path / "var", a)
    assert 1 <= max(before_a) < 4

    second = Driver(env, tmp_path / "second.log")
    started.append(second.start())
    job_a = _resumed_as_attempt_2(second, a, before_a)

    b = second.client.post("/train", json=big).json()["id"]
    checkpoints = tmp_path / "artifacts" / "jobs" / b / "checkpoints"
    caught = _catch_a_checkpoint_being_written(second, checkpoints, epochs=4)
    interrupted = int(caught.name.split(".")[0].removeprefix("epoch-"))
    before_b = _registered(tmp_path / "var", b)
    assert max(before_b) == interrupted - 1, "the half-written epoch was not registered"

    third = Driver(env, tmp_path / "third.log")
    started.append(third.start())
    try:
        job_b = _resumed_as_attempt_2(third, b, before_b)
        kept = third.client.get(f"/jobs/{b}/checkpoints").json()["checkpoints"]
        assert [c["epoch"] for c in kept] == [2, 3, 4]
        assert next(c for c in kept if c["epoch"] == 4)["attempt"] == 2
        for c in kept:
            files = sorted(p.name for p in Path(c["uri"]).iterdir())
            assert files == ["meta.json", "rank-0.json", "rank-0.safetensors", "rank-1.json", "rank-1.safetensors",
                             "weights.safetensors"], files  # fmt: skip
        assert not caught.exists(), "publishing the epoch again removed the dead run's partial directory"
        assert sorted(os.listdir(checkpoints)) == ["epoch-2", "epoch-3", "epoch-4"]

        # the same jobs, never interrupted
        straight_a = wait_final(third.client, third.client.post("/train", json=survivor).json()["id"])
        straight_b = wait_final(third.client, third.client.post("/train", json=big).json()["id"])
        for resumed, straight in ((job_a, straight_a), (job_b, straight_b)):
            assert straight["status"] == "SUCCEEDED", straight["error"]
            assert resumed["result"]["validation"] == straight["result"]["validation"]
            assert same_weights(model_weights(third.client, resumed), model_weights(third.client, straight))
        assert checkpoint_epochs(third.client, a) == [2, 3, 4]
    finally:
        third.stop()
