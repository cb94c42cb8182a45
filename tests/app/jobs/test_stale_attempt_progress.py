"""A slow driver's former attempt writes no progress onto its next attempt's row, on both databases.

The reconciler gave up attempt 1 (its heartbeats stalled) and the same driver took attempt 2: the row names the same
``worker_id``, so a write guarded by the driver alone let attempt 1's late progress (and the heartbeat it carries)
land on attempt 2's row, its bar jumping back and forth between the two and the reconciler reading attempt 1's
heartbeat as attempt 2's.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from app.core.settings import Settings
from app.db.base import utcnow
from app.db.models import Job
from app.db.session import transaction
from app.jobs.runtime import JobRuntime
from app.services import jobs
from app.services.reconcile import reconcile
from tests.app.jobs.taking import take


def _row(db: Any, job_id: str) -> tuple[int, float, str | None, Any]:
    with db() as s:
        job = s.get(Job, job_id)
        return job.attempt, job.progress, job.progress_message, job.heartbeat_at


def test_a_former_attempt_of_the_same_driver_writes_no_progress(db: Any, spark: Any, tmp_path: Path) -> None:
    settings = Settings(var_dir=tmp_path / "var", artifact_root=tmp_path / "artifacts")
    rt = JobRuntime(settings=settings, db=db, spark=spark, worker_id="slow:1:boot")
    with transaction(db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={"name": "m"}, framework="torch", name="m")
        job_id = job.id
    old = take(rt, job_id, tmp_path)
    old.progress(0.5, "epoch 5 of 10")
    stale = utcnow() - timedelta(seconds=120)
    with transaction(db) as s:  # its heartbeats stop for longer than the reconciler waits
        s.get(Job, job_id).heartbeat_at = stale
    actions = reconcile(db=db, send=lambda *m: None, stale_after_s=30, default_queue="q")
    assert [a["action"] for a in actions] == ["retried"]
    new = take(rt, job_id, tmp_path)  # the same driver takes attempt 2
    assert new.attempt == 2
    new.progress(0.1, "epoch 1 of 10")
    attempt, progress, message, beat = _row(db, job_id)
    assert (attempt, progress, message) == (2, 0.1, "epoch 1 of 10")

    old.progress(0.9, "epoch 9 of 10")  # attempt 1, still running somewhere on this driver, reports late
    assert _row(db, job_id) == (2, 0.1, "epoch 1 of 10", beat), "attempt 1's progress landed on attempt 2's row"

    with transaction(db) as s:  # the service call itself, as any other caller would make it
        jobs.set_progress(session=s, job_id=job_id, fraction=1.0, message="done", worker_id=rt.worker_id, attempt=1)
    assert _row(db, job_id) == (2, 0.1, "epoch 1 of 10", beat)
    with transaction(db) as s:
        jobs.set_progress(session=s, job_id=job_id, fraction=0.2, message="epoch 2", worker_id=rt.worker_id, attempt=2)
    assert _row(db, job_id)[:3] == (2, 0.2, "epoch 2")
