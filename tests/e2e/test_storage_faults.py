"""The artifact store full during a checkpoint (a small tmpfs of the test's own as the artifact root, filled up): the
attempt fails with reason STORAGE_FULL and a message that says so, nothing half-written is registered or left
under a checkpoint's name, and once there is room again the next attempt (after ``SPARKTRAIN_RETRY_DELAY_S``)
trains the job to the end."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import TAXI_FEATURES, running_service

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MB tmpfs, unmounted afterwards (root only)."""
    mount = tmp_path / "store"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount)], capture_output=True,
                          check=False)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode()[:200]}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path, leave: int) -> Path:
    """A file that leaves ``leave`` bytes free."""
    filler = disk / "filler"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with filler.open("wb") as out:
        out.truncate(0)
        out.write(b"\0" * max(0, free - leave))
    return filler


def test_a_full_disk_during_a_checkpoint_fails_the_attempt_clearly_and_the_next_one_succeeds(
    spark: Any, tmp_path: Path, small_disk: Path
) -> None:
    body = {
        "name": "full-disk",
        "framework": "xgboost",
        "dataset": {"uri": "datasets/taxi/train.parquet", "features": TAXI_FEATURES, "label": "fare_amount",
                    "task": "regression"},
        "validation": {"uri": "datasets/taxi/eval.parquet"},
        "params": {"num_round": 60, "max_depth": 6, "checkpoint_rounds": 10, "num_workers": 1},
    }  # fmt: skip
    with running_service(spark, tmp_path, artifact_root=small_disk, retry_delay_s=2.0, reconcile_interval_s=1.0) as svc:
        (small_disk / "jobs").mkdir()
        filler = _fill(small_disk, leave=4096)
        job_id = svc.train(body)["id"]
        deadline = time.monotonic() + 300
        while not ((job := svc.client.get(f"/jobs/{job_id}").json())["attempts"] or [{}])[0].get("error_reason"):
            assert job["status"] not in ("SUCCEEDED", "FAILED"), job
            assert time.monotonic() < deadline, job
            time.sleep(0.2)
        first = job["attempts"][0]
        assert first["error_reason"] == "STORAGE_FULL", first
        assert "full" in first["error_message"], first
        assert job["status"] == "QUEUED" and job["attempt"] == 2, job
        checkpoints = small_disk / "jobs" / job_id / "checkpoints"
        left = sorted(p.name for p in checkpoints.iterdir()) if checkpoints.exists() else []
        assert not [name for name in left if not (checkpoints / name / "model.json").is_file()], left
        registered = svc.client.get(f"/jobs/{job_id}/checkpoints").json()["checkpoints"]
        assert all(Path(c["uri"], "model.json").is_file() for c in registered), registered

        filler.unlink()  # room again: the retry, due after the delay, trains to the end
        done = svc.wait(job_id, {"SUCCEEDED", "FAILED"}, timeout=600)
        assert done["status"] == "SUCCEEDED", done["error"]
        assert done["attempt"] == 2 and done["result"]["rounds"]["trained"] == 60
        rounds = [c["epoch"] for c in svc.client.get(f"/jobs/{job_id}/checkpoints").json()["checkpoints"]]
        assert rounds == [10, 20, 30, 40, 50, 60], rounds
