"""The artifact store full or read-only while a job writes to it: the attempt fails with reason STORAGE_FULL or
STORAGE_UNAVAILABLE and a message that says so and what to do, nothing half-written is registered or left under a
checkpoint's or a model's name, and once the store is mended the next attempt (after ``SPARKTRAIN_RETRY_DELAY_S``)
trains the job to the end.

- xgboost: the artifact root (a small tmpfs of the test's own) filled up before the first round checkpoint;
- torch: the job's directory and its ``checkpoints/`` mounted as two tmpfs, one filled up or remounted read-only,
  so that a checkpoint (the next attempt starts from scratch) or the final model write (the next attempt resumes
  from the newest checkpoint) fails."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.chaos import digits_job
from tests.helpers import TAXI_FEATURES, running_service, tmpfs

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MB tmpfs, unmounted afterwards (root only)."""
    with tmpfs(tmp_path / "store", "64m") as mount:
        yield mount


def _fill(disk: Path, leave: int) -> Path:
    """A file that leaves ``leave`` bytes free."""
    filler = disk / "filler"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with filler.open("wb") as out:
        out.truncate(0)
        out.write(b"\0" * max(0, free - leave))
    return filler


def _first_attempt_ended(svc: Any, job_id: str) -> dict[str, Any]:
    """The job once its first attempt has ended with a reason (it must not have finished without one)."""
    deadline = time.monotonic() + 300
    while not ((job := svc.client.get(f"/jobs/{job_id}").json())["attempts"] or [{}])[0].get("error_reason"):
        assert job["status"] not in ("SUCCEEDED", "FAILED"), job
        assert time.monotonic() < deadline, job
        time.sleep(0.2)
    return dict(job)


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
        job = _first_attempt_ended(svc, job_id)
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


# --- torch: a checkpoint or the final model written to a full or read-only store ------------------------------


def _mount(point: Path, mounted: list[Path], size: str = "64m") -> Path:
    point.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)], capture_output=True,
                          check=False)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode()[:200]}")
    mounted.append(point)
    return point


@pytest.fixture
def mounted() -> Iterator[list[Path]]:
    """Mount points to take down afterwards, the innermost first."""
    points: list[Path] = []
    yield points
    for point in reversed(points):
        subprocess.run(["umount", "-l", str(point)], check=False)


def _break(disk: Path, fault: str) -> Callable[[], None]:
    """Fill ``disk`` up or make it read-only; returns what mends it (in place: what is on it stays)."""
    if fault == "full":
        filler = _fill(disk, leave=4096)
        return filler.unlink
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    return lambda: subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)


def _left_over(work: Path) -> list[str]:
    """What a failed write left in the job's directory that is not a complete, published file or directory."""
    return sorted(
        str(p.relative_to(work))
        for p in work.rglob("*")
        if ".partial" in p.name or ".old-" in p.name or p.suffix == ".tmp"
    )


REASONS = {"full": ("STORAGE_FULL", "full"), "read-only": ("STORAGE_UNAVAILABLE", "Read-only file system")}


@pytest.mark.parametrize("fault", ["full", "read-only"])
@pytest.mark.parametrize("write", ["checkpoint", "model"])
def test_a_torch_checkpoint_or_model_write_to_a_broken_store_fails_the_attempt_clearly_and_the_next_one_succeeds(
    spark: Any, tmp_path: Path, mounted: list[Path], write: str, fault: str
) -> None:
    """The job's directory and its checkpoints/ are file systems of their own (two tmpfs): breaking the
    checkpoints' fails the first checkpoint, breaking the job directory's fails the final model write alone."""
    with running_service(spark, tmp_path, retry_delay_s=5.0, reconcile_interval_s=1.0) as svc:
        job_id = svc.train(digits_job(f"torch-{write}-{fault}", epochs=2, batch=32, seed=3))["id"]
        work = tmp_path / "artifacts" / "jobs" / job_id
        assert not work.exists() or not any(work.iterdir()), "the job wrote before its store was set up"
        _mount(work, mounted)
        _mount(work / "checkpoints", mounted)
        mend = _break(work / "checkpoints" if write == "checkpoint" else work, fault)

        job = _first_attempt_ended(svc, job_id)
        first = job["attempts"][0]
        reason, words = REASONS[fault]
        assert first["error_reason"] == reason, first
        assert words in first["error_message"] and "SPARKTRAIN_ARTIFACT_ROOT" in first["error_message"], first
        assert job["status"] == "QUEUED" and job["attempt"] == 2, job
        assert _left_over(work) == [], "a failed write left half-written files behind"
        registered = [c["epoch"] for c in svc.client.get(f"/jobs/{job_id}/checkpoints").json()["checkpoints"]]
        assert registered == ([] if write == "checkpoint" else [1, 2]), registered
        kept = sorted(p.name for p in (work / "checkpoints").iterdir() if p.name != "filler")
        assert kept == [f"epoch-{e}" for e in registered], kept
        assert not (work / "model").exists(), "no model directory before the model is complete"
        assert svc.client.get("/models").json()["items"] == [], "no model version registered"

        mend()  # the retry, due after the delay, trains to the end
        done = svc.wait(job_id, {"SUCCEEDED", "FAILED"}, timeout=300)
        assert done["status"] == "SUCCEEDED", done["error"]
        assert done["attempt"] == 2, done["attempts"]
        how = "resumes from checkpoint" if write == "model" else "starts from scratch"
        logs = [line["message"] for line in svc.client.get(f"/jobs/{job_id}/logs").json()["lines"]]
        assert any(m.startswith("attempt 2 queued in 5 s: " + how) for m in logs), logs
        versions = [v for m in svc.client.get("/models").json()["items"] for v in m["versions"]]
        assert [(v["job_id"], v["version"]) for v in versions] == [(job_id, 1)], versions
        assert {"spec.json", "weights.safetensors", "MLmodel"} <= {p.name for p in (work / "model").iterdir()}
        epochs = [c["epoch"] for c in svc.client.get(f"/jobs/{job_id}/checkpoints").json()["checkpoints"]]
        assert epochs == [1, 2], epochs
        assert _left_over(work) == []
