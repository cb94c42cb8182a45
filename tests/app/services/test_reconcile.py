"""The reconciler's rules on a real database (SQLite and PostgreSQL): which lost jobs fail, which are cancelled,
which stay, and that two reconcilers never both act on one job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from app.core.jobstates import JobStatus
from app.db.base import utcnow
from app.db.models import Checkpoint, Job
from app.db.session import transaction
from app.services import jobs
from app.services.reconcile import reconcile


def never(name: str, job_id: str) -> None:
    raise AssertionError(f"nothing should be queued, got {name} {job_id}")


def running_job(db: Any, *, status: JobStatus, beat_age_s: float, framework: str = "spark_ml") -> str:
    with transaction(db) as session:
        job, _ = jobs.create_job(session=session, job_type="train", request={"name": "x"}, framework=framework)
        jobs.transition(session=session, job_id=job.id, sources=[JobStatus.QUEUED], target=JobStatus.STARTING,
                        worker_id="host:1:dead", started_at=utcnow(),
                        heartbeat_at=utcnow() - timedelta(seconds=beat_age_s))  # fmt: skip
        if status != JobStatus.STARTING:
            jobs.transition(session=session, job_id=job.id, sources=[JobStatus.STARTING], target=JobStatus.RUNNING)
        if status == JobStatus.CANCELLING:
            jobs.transition(session=session, job_id=job.id, sources=[JobStatus.RUNNING], target=JobStatus.CANCELLING)
        return job.id


def test_a_fresh_heartbeat_is_left_alone(db: Any) -> None:
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=1)
    assert reconcile(db=db, enqueue=never, stale_after_s=30) == []
    with db() as session:
        assert session.get(Job, job_id).status == "RUNNING"


def test_a_lost_job_without_checkpoint_fails_with_driver_lost(db: Any) -> None:
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60)
    actions = reconcile(db=db, enqueue=never, stale_after_s=30)
    assert actions == [{"job_id": job_id, "action": "failed", "why": "only torch training resumes from checkpoints"}]
    with db() as session:
        job = session.get(Job, job_id)
        assert job.status == "FAILED" and job.error_reason == "DRIVER_LOST" and "host:1:dead" in job.error_message
        assert job.attempts[0]["attempt"] == 1 and job.attempts[0]["status"] == "FAILED"
    assert reconcile(db=db, enqueue=never, stale_after_s=30) == [], "a second pass finds nothing to do"


def test_a_lost_cancel_ends_cancelled(db: Any) -> None:
    job_id = running_job(db, status=JobStatus.CANCELLING, beat_age_s=60)
    assert reconcile(db=db, enqueue=never, stale_after_s=30) == [{"job_id": job_id, "action": "cancelled"}]
    with db() as session:
        assert session.get(Job, job_id).status == "CANCELLED"


def test_a_torch_job_out_of_attempts_is_not_retried(db: Any) -> None:
    job_id = running_job(db, status=JobStatus.STARTING, beat_age_s=60, framework="torch")
    with transaction(db) as session:
        session.get(Job, job_id).attempt = 3
        session.add(Checkpoint(id="c" * 32, job_id=job_id, epoch=1, uri="file:///nowhere"))
    assert reconcile(db=db, enqueue=never, stale_after_s=30)[0]["why"] == "no attempts left"


def test_a_torch_job_with_a_checkpoint_is_queued_again(db: Any) -> None:
    job_id = running_job(db, status=JobStatus.RUNNING, beat_age_s=60, framework="torch")
    with transaction(db) as session:
        session.add(Checkpoint(id="a" * 32, job_id=job_id, epoch=1, uri="file:///one"))
        session.add(Checkpoint(id="b" * 32, job_id=job_id, epoch=2, uri="file:///two"))
    queued: list[tuple[str, str]] = []
    actions = reconcile(db=db, enqueue=lambda name, jid: queued.append((name, jid)), stale_after_s=30)
    assert actions == [{"job_id": job_id, "action": "retried", "checkpoint": "b" * 32, "epoch": 2}]
    assert queued == [("train.torch", job_id)]
    with db() as session:
        job = session.get(Job, job_id)
        assert (job.status, job.attempt, job.worker_id) == ("QUEUED", 2, None)
        assert job.request["training"]["resume_from"] == "b" * 32
        assert [a["error_reason"] for a in job.attempts] == ["DRIVER_LOST"]
