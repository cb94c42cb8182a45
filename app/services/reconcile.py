"""The reconciler: jobs whose driver died are failed with DRIVER_LOST, and resumable ones are retried.

A running job's driver writes a heartbeat every second (workers/runner.py). A job in STARTING, RUNNING or
CANCELLING whose heartbeat is older than ``heartbeat_stale_s`` lost its driver, whichever process that was and
whether or not it comes back. Each such job is, in one guarded transition each (so two reconcilers on two drivers
never both act):

- CANCELLING: CANCELLED (the user asked for it; the driver is gone);
- otherwise FAILED with reason DRIVER_LOST; then a torch training job with a checkpoint and attempts left goes
  back to QUEUED as attempt + 1 with ``training.resume_from`` = its newest checkpoint, and is queued again.

The job keeps its id; ``attempts`` records every attempt that ended this way.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.core.jobstates import ACTIVE, JobStatus, JobType
from app.db.base import utcnow
from app.db.models import Checkpoint, Job
from app.db.session import transaction
from app.services import jobs
from app.services.training import Enqueue
from workers.families import task_name

log = logging.getLogger(__name__)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _newest_checkpoint(session: Session, job_id: str) -> Checkpoint | None:
    stmt = select(Checkpoint).where(Checkpoint.job_id == job_id).order_by(Checkpoint.epoch.desc()).limit(1)
    return session.execute(stmt).scalar_one_or_none()


def reconcile(*, db: sessionmaker[Session], enqueue: Enqueue, stale_after_s: float) -> list[dict[str, Any]]:
    """One pass; returns what was done to each lost job (for logs and tests)."""
    now = utcnow()
    cutoff = now - timedelta(seconds=stale_after_s)
    with db() as session:
        stmt = select(Job.id).where(
            Job.status.in_([s.value for s in ACTIVE]),
            (Job.heartbeat_at.is_(None)) | (Job.heartbeat_at < cutoff),
        )
        lost = list(session.execute(stmt).scalars())
    actions = [a for job_id in lost if (a := _reconcile_one(db, enqueue, job_id, now, cutoff)) is not None]
    return actions


def _reconcile_one(
    db: sessionmaker[Session], enqueue: Enqueue, job_id: str, now: datetime, cutoff: datetime
) -> dict[str, Any] | None:
    with transaction(db) as session:
        job = session.get(Job, job_id)
        if job is None or job.status not in {s.value for s in ACTIVE}:
            return None
        beat = job.heartbeat_at
        if beat is not None and beat.replace(tzinfo=cutoff.tzinfo) >= cutoff:
            return None  # it came back to life since the query
        status = JobStatus(job.status)
        message = (
            f"driver {job.worker_id or '?'} stopped sending heartbeats "
            f"(last at {_iso(beat) or 'never'}); the job's driver process is gone"
        )
        record = {
            "attempt": job.attempt,
            "worker_id": job.worker_id,
            "started_at": _iso(job.started_at),
            "ended_at": _iso(now),
            "error_reason": "DRIVER_LOST",
            "error_message": message,
        }
        history = [*(job.attempts or [])]
        if status == JobStatus.CANCELLING:
            won = jobs.transition(session=session, job_id=job.id, sources=[status], target=JobStatus.CANCELLED,
                                  finished_at=now, attempts=[*history, {**record, "status": "CANCELLED"}])  # fmt: skip
            return {"job_id": job.id, "action": "cancelled"} if won else None
        won = jobs.transition(
            session=session,
            job_id=job.id,
            sources=[status],
            target=JobStatus.FAILED,
            finished_at=now,
            error_reason="DRIVER_LOST",
            error_message=message,
            attempts=[*history, {**record, "status": "FAILED"}],
        )
        if not won:
            return None
        jobs.add_log(session=session, job_id=job.id, level="WARNING", message=f"attempt {job.attempt}: {message}")
        checkpoint = _newest_checkpoint(session, job.id)
        resumable = (
            job.type == JobType.TRAIN and job.framework == "torch" and checkpoint is not None
            and job.attempt < job.max_attempts
        )  # fmt: skip
        if not resumable:
            why = "no checkpoint to resume from" if checkpoint is None else "no attempts left"
            if job.type != JobType.TRAIN or job.framework != "torch":
                why = "only torch training resumes from checkpoints"
            return {"job_id": job.id, "action": "failed", "why": why}
        assert checkpoint is not None
        request = dict(job.request)
        request["training"] = {**dict(request.get("training") or {}), "resume_from": checkpoint.id}
        jobs.transition(
            session=session,
            job_id=job.id,
            sources=[JobStatus.FAILED],
            target=JobStatus.QUEUED,
            attempt=job.attempt + 1,
            request=request,
            progress=0.0,
            progress_message=None,
            error_reason=None,
            error_message=None,
            started_at=None,
            finished_at=None,
            worker_id=None,
            heartbeat_at=None,
        )
        jobs.add_log(
            session=session,
            job_id=job.id,
            level="WARNING",
            message=f"attempt {job.attempt + 1} queued: resumes from checkpoint {checkpoint.id} "
            f"(epoch {checkpoint.epoch})",
        )
        name = task_name(JobType.TRAIN, "torch")
    try:
        enqueue(name, job_id)
    except Exception:  # the message is lost, not the job: the next start-up or pass finds it QUEUED too old
        log.exception("could not queue the retry of job %s", job_id)
    return {"job_id": job_id, "action": "retried", "checkpoint": checkpoint.id, "epoch": checkpoint.epoch}
