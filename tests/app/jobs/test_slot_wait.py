"""A job that ran before and finds fewer task slots than its plan's workers waits for them for
SPARKTRAIN_SLOT_WAIT_S (it was a constant 5 minutes), then ends NO_EXECUTORS naming the setting: an operator whose
cluster's master replaces a lost executor late (or who would rather have the job queued again sooner) can say so.

The driver's session is a real local[2] one, whose 2 slots are short of the 3 workers; the slots the request was
planned against are a standalone master's (a local master fails such a job at once, its cores never change)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.core.settings import Settings
from app.db.models import Job, JobLog
from app.jobs import dispatch
from app.jobs.runtime import JobRuntime
from tests.app.jobs.taking import take as _take
from tests.app.jobs.test_runner_ownership import _new_job
from workers import cluster
from workers.context import JobFailure


@pytest.mark.timeout(120)  # the old constant waited 300 s: this test failed here
def test_a_retry_waits_for_its_slots_as_long_as_the_setting_says(db: Any, spark: Any, tmp_path: Path) -> None:
    settings = Settings(var_dir=tmp_path / "var", artifact_root=tmp_path / "artifacts", slot_wait_s=1)
    rt = JobRuntime(settings=settings, db=db, spark=spark, worker_id="a:1:boot")
    job_id = _new_job(db)
    ctx = _take(rt, job_id, tmp_path)
    planned = cluster.TaskSlots(count=2, master="spark://127.0.0.1:7077", executors=1, by_cores=2)

    with pytest.raises(JobFailure) as info:
        dispatch._wait_for_slots(rt, ctx, 3, planned, attempt=2)

    assert info.value.reason == "NO_EXECUTORS"
    assert "of waiting (SPARKTRAIN_SLOT_WAIT_S=1), 3 workers need 3 task slots at once" in info.value.message
    waiting = "waiting for 3 task slots, 2 now: the job ran before on a cluster that had them"
    with db() as s:
        assert s.get(Job, job_id).progress_message == waiting
        assert waiting in [row.message for row in s.query(JobLog).filter(JobLog.job_id == job_id)]
