"""The reconciler ends a tune job whose driver died together with its trials (SQLite and PostgreSQL): the tune
job's own runner, which would cancel them, is gone with its driver. A tune job that is only queued again keeps
its trials running: its next attempt attaches to them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from app.core.jobstates import JobStatus
from app.db.base import utcnow
from app.db.models import Job
from app.db.session import transaction
from app.services import jobs
from tests.app.services.test_reconcile import never, reconcile, running_job


def _trial(db: Any, tune_id: str, number: int, status: JobStatus) -> str:
    """A trial job of ``tune_id`` in ``status``, its driver alive (a fresh heartbeat): only the cancel can stop it."""
    with transaction(db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={"name": f"t{number}"}, framework="torch",
                                 parent_id=tune_id, trial=number)  # fmt: skip
        row = s.get(Job, job.id)
        row.status = status.value
        if status != JobStatus.QUEUED:
            row.worker_id, row.started_at, row.heartbeat_at = "host:2:alive", utcnow(), utcnow()
        if status == JobStatus.SUCCEEDED:
            row.finished_at = utcnow() - timedelta(seconds=5)
        return job.id


def _statuses(db: Any, *job_ids: str) -> list[str]:
    with db() as s:
        return [s.get(Job, job_id).status for job_id in job_ids]


@pytest.mark.parametrize(("status", "attempt", "action", "ended"),
                         [(JobStatus.CANCELLING, 1, "cancelled", "CANCELLED"),
                          (JobStatus.RUNNING, 3, "failed", "FAILED")])  # fmt: skip
def test_a_tune_job_the_reconciler_ends_cancels_its_trials(
    db: Any, status: JobStatus, attempt: int, action: str, ended: str
) -> None:
    """Cancelled on request, or out of attempts: its running trials go to CANCELLING (their drivers' watchers stop
    them), its queued ones end CANCELLED at once, finished ones and another tune job's trials are left alone."""
    tune_id = running_job(db, status=status, beat_age_s=60, framework="torch", job_type="tune")
    with transaction(db) as s:
        s.get(Job, tune_id).attempt = attempt
    other_tune = running_job(db, status=JobStatus.RUNNING, beat_age_s=0, framework="torch", job_type="tune")
    done = _trial(db, tune_id, 0, JobStatus.SUCCEEDED)
    running = _trial(db, tune_id, 1, JobStatus.RUNNING)
    starting = _trial(db, tune_id, 2, JobStatus.STARTING)
    queued = _trial(db, tune_id, 3, JobStatus.QUEUED)
    stopping = _trial(db, tune_id, 4, JobStatus.CANCELLING)
    elsewhere = _trial(db, other_tune, 0, JobStatus.RUNNING)

    (outcome,) = reconcile(db=db, send=never, stale_after_s=30)

    assert (outcome["job_id"], outcome["action"]) == (tune_id, action)
    assert _statuses(db, tune_id, done, running, starting, queued, stopping, elsewhere) == [
        ended, "SUCCEEDED", "CANCELLING", "CANCELLING", "CANCELLED", "CANCELLING", "RUNNING"]  # fmt: skip
    assert sorted(outcome["trials_cancelled"]) == sorted([running, starting, queued])
    with db() as s:
        assert s.get(Job, running).cancel_requested_at is not None
        lines = [line.message for line in jobs.list_logs(session=s, job_id=tune_id)]
    (line,) = [line for line in lines if "trial" in line and "cancel" in line]
    for number, job_id in ((1, running), (2, starting), (3, queued)):
        assert f"trial {number} (job {job_id})" in line, line
    assert "trial 0 " not in line and "trial 4 " not in line


def test_a_tune_job_queued_again_keeps_its_trials_running(db: Any) -> None:
    tune_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="torch", job_type="tune")
    running = _trial(db, tune_id, 0, JobStatus.RUNNING)
    queued = _trial(db, tune_id, 1, JobStatus.QUEUED)

    (outcome,) = reconcile(db=db, send=lambda *m: None, stale_after_s=30)

    assert outcome["action"] == "retried" and "trials_cancelled" not in outcome
    assert _statuses(db, tune_id, running, queued) == ["QUEUED", "RUNNING", "QUEUED"]
    with db() as s:
        assert s.get(Job, running).cancel_requested_at is None
