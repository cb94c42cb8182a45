"""What a job's progress says once the reconciler has ended its attempt (its driver lost: no heartbeat). Queued
again, it says so and how the next attempt starts, from 0 (what the dead attempt last said, "epoch 3 of 10", would
tell its user it still ran); failed for good (no attempt left), it says it failed and why, as a job its runner
failed does (app/jobs/settle.py ``ended_message``): it kept "epoch 3 of 10" on a FAILED job."""

from __future__ import annotations

from typing import Any

from app.core.jobstates import JobStatus
from app.db.base import utcnow
from app.db.models import Job
from app.db.session import transaction
from app.services import jobs
from app.services.reconcile import fail_unreadable
from tests.app.services.test_reconcile import never, reconcile, running_job


def _said(db: Any, job_id: str, fraction: float, message: str) -> None:
    with transaction(db) as session:
        jobs.set_progress(session=session, job_id=job_id, fraction=fraction, message=message)
        session.get(Job, job_id).heartbeat_at = None  # then its driver went


def test_a_lost_job_queued_again_says_so_and_not_what_its_dead_attempt_said(db: Any) -> None:
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="torch", queue="q")
    _said(db, job_id, 0.3, "epoch 3 of 10, step 40")
    sent: list[tuple[str, str, str]] = []
    [action] = reconcile(db=db, send=lambda *m: sent.append(m), stale_after_s=30)
    assert action["action"] == "retried"
    with db() as session:
        job = session.get(Job, job_id)
        assert (job.status, job.progress, job.progress_message) == ("QUEUED", 0.0, "attempt 2 queued: starts from "
                                                                    "scratch")  # fmt: skip


def test_a_lost_job_out_of_attempts_says_it_failed_and_why(db: Any) -> None:
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="torch")
    with transaction(db) as session:
        session.get(Job, job_id).attempt = 3
    _said(db, job_id, 0.3, "epoch 3 of 10, step 40")
    [action] = reconcile(db=db, send=never, stale_after_s=30)
    assert (action["action"], action["why"]) == ("failed", "no attempts left")
    with db() as session:
        job = session.get(Job, job_id)
        assert (job.status, job.error_reason) == ("FAILED", "DRIVER_LOST")
        assert (job.progress, job.progress_message) == (0.3, "failed: DRIVER_LOST")


def test_a_job_failed_for_a_row_that_cannot_be_read_says_it_failed(db: Any) -> None:
    """A retry queued ("attempt 2 queued: ...") whose row turned out unreadable kept saying it was queued."""
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60)
    _said(db, job_id, 0.5, "attempt 2 queued: resumes from checkpoint 73970fc9 (epoch 11)")
    with transaction(db) as session:
        done = fail_unreadable(session=session, job_id=job_id, sources=[JobStatus.RUNNING], what="its plan",
                               now=utcnow())  # fmt: skip
    assert done is not None and done["action"] == "failed"
    with db() as session:
        job = session.get(Job, job_id)
        assert (job.status, job.progress_message) == ("FAILED", f"failed: {job.error_reason}")
