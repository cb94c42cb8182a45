"""The reconciler: jobs whose driver died are failed with DRIVER_LOST, and resumable ones are retried.

A running job's driver writes a heartbeat every second (app/jobs/watcher.py). A job in STARTING, RUNNING or
CANCELLING whose heartbeat is older than ``heartbeat_stale_s`` lost its driver, whichever process that was and
whether or not it comes back. Each such job is, in one guarded transition each (so two reconcilers on two drivers
never both act):

- CANCELLING: CANCELLED (the user asked for it; the driver is gone);
- otherwise FAILED with reason DRIVER_LOST; then a torch training job with a checkpoint and attempts left goes
  back to QUEUED as attempt + 1 whose stored plan resumes from its newest checkpoint (before the last epoch,
  see :func:`_resume_point`; the request's ``training.resume_from`` names it too), and is queued again on the
  queue its lost attempt was taken from (drivers with different queues may share the database).

The runner retries the same way when Spark loses a worker of a training job's barrier stage (WORKER_LOST, see
:func:`retry_from_checkpoint`). The job keeps its id; ``attempts`` has one entry per attempt, and an attempt that
ended this way says how. A retry whose message the broker refused stays QUEUED with ``sent: false``; a later
pass sends it again (a second copy of a message is harmless: only one delivery wins QUEUED -> STARTING).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.core.jobstates import ACTIVE, JobStatus, JobType
from app.db.base import utcnow
from app.db.models import Checkpoint, Job
from app.db.session import transaction
from app.schemas.train import TrainingOptions
from app.services import attempts, jobs
from workers import plans
from workers.families import task_name
from workers.training.torch.config import ResumePoint, TorchPlan

log = logging.getLogger(__name__)

Send = Callable[[str, str, str], None]
"""``send(task_name, job_id, queue)``: put a job's message on a queue; raises when the broker refuses it."""


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _resume_point(session: Session, job: Job) -> Checkpoint | None:
    """The job's newest checkpoint before its last epoch. A checkpoint of the last epoch (the driver died while it
    saved the model or recorded the result) has nothing left to train, and a resume must train at least one
    epoch: the attempt redoes the last epoch from the one before, which gives the same model (resuming is exact)."""
    epochs = (job.request.get("training") or {}).get("epochs") or TrainingOptions.model_fields["epochs"].default
    stmt = (
        select(Checkpoint)
        .where(Checkpoint.job_id == job.id, Checkpoint.epoch < int(epochs))
        .order_by(Checkpoint.epoch.desc())
        .limit(1)
    )
    return session.execute(stmt).scalar_one_or_none()


def reconcile(
    *, db: sessionmaker[Session], send: Send, stale_after_s: float, default_queue: str
) -> list[dict[str, Any]]:
    """One pass; returns what was done to each lost job (for logs and tests). ``default_queue`` is for jobs
    whose queue was never recorded (started before queues were recorded)."""
    now = utcnow()
    cutoff = now - timedelta(seconds=stale_after_s)
    with db() as session:
        stmt = select(Job.id).where(
            Job.status.in_([s.value for s in ACTIVE]),
            (Job.heartbeat_at.is_(None)) | (Job.heartbeat_at < cutoff),
        )
        lost = list(session.execute(stmt).scalars())
        unsent = attempts.unsent_retries(session=session, older_than=cutoff)
    actions = [a for job_id in lost if (a := _reconcile_one(db, send, job_id, now, cutoff, default_queue))]
    for job_id, attempt, queue in unsent:
        if send_retry(db=db, send=send, job_id=job_id, attempt=attempt, queue=queue or default_queue):
            actions.append({"job_id": job_id, "action": "sent again", "attempt": attempt})
    return actions


def _reconcile_one(
    db: sessionmaker[Session], send: Send, job_id: str, now: datetime, cutoff: datetime, default_queue: str
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
        if status == JobStatus.CANCELLING:
            record = _ended(job, now, "CANCELLED", "DRIVER_LOST", message)
            won = jobs.transition(session=session, job_id=job.id, sources=[status], target=JobStatus.CANCELLED,
                                  finished_at=now, attempts=record)  # fmt: skip
            return {"job_id": job.id, "action": "cancelled"} if won else None
        won = end_attempt(session=session, job=job, sources=[status], reason="DRIVER_LOST", message=message, now=now)
        if not won:
            return None
        session.refresh(job)
        retried = retry_from_checkpoint(session=session, job=job, now=now)
        if isinstance(retried, str):
            return {"job_id": job.id, "action": "failed", "why": retried}
        queue = attempts.queue_of(job) or default_queue
        attempt = job.attempt + 1
    send_retry(db=db, send=send, job_id=job_id, attempt=attempt, queue=queue)
    return {"job_id": job_id, "action": "retried", "checkpoint": retried.id, "epoch": retried.epoch, "queue": queue}


def _ended(job: Job, now: datetime, status: str, reason: str, message: str) -> list[dict[str, Any]]:
    """The job's ``attempts`` with its current attempt marked as ended."""
    return attempts.update_attempt(
        job,
        job.attempt,
        worker_id=job.worker_id,
        started_at=_iso(job.started_at),
        ended_at=_iso(now),
        status=status,
        error_reason=reason,
        error_message=message,
    )


def end_attempt(
    *,
    session: Session,
    job: Job,
    sources: list[JobStatus],
    reason: str,
    message: str,
    now: datetime,
    only_if: dict[str, Any] | None = None,
) -> bool:
    """FAILED with ``reason``, the attempt recorded in ``attempts`` and the job's log: one guarded transition."""
    won = jobs.transition(
        session=session,
        job_id=job.id,
        sources=sources,
        target=JobStatus.FAILED,
        only_if=only_if,
        finished_at=now,
        error_reason=reason,
        error_message=message,
        attempts=_ended(job, now, "FAILED", reason, message),
    )
    if won:
        jobs.add_log(session=session, job_id=job.id, level="WARNING", message=f"attempt {job.attempt}: {message}")
    return won


def retry_from_checkpoint(*, session: Session, job: Job, now: datetime) -> Checkpoint | str:
    """A FAILED torch training job with a checkpoint and attempts left goes back to QUEUED as attempt + 1 that
    resumes from its newest checkpoint; returns that checkpoint, or why the job stays FAILED. The caller sends
    the message after the commit (:func:`send_retry`)."""
    checkpoint = _resume_point(session, job)
    if job.type != JobType.TRAIN or job.framework != "torch":
        return "only torch training resumes from checkpoints"
    if checkpoint is None:
        return "no checkpoint to resume from"
    if job.attempt >= job.max_attempts:
        return "no attempts left"
    request = dict(job.request)
    request["training"] = {**dict(request.get("training") or {}), "resume_from": checkpoint.id}
    try:
        plan = _resuming(job, checkpoint)
    except (TypeError, ValueError, KeyError) as exc:
        return f"its stored plan cannot be read ({type(exc).__name__}: {exc})"
    attempt = job.attempt + 1
    queue = attempts.queue_of(job)
    entry: dict[str, Any] = {"queued_at": _iso(now), "sent": False}
    if queue is not None:
        entry["queue"] = queue
    won = jobs.transition(
        session=session,
        job_id=job.id,
        sources=[JobStatus.FAILED],
        target=JobStatus.QUEUED,
        attempt=attempt,
        attempts=attempts.update_attempt(job, attempt, **entry),
        request=request,
        plan=plan,
        progress=0.0,
        progress_message=None,
        error_reason=None,
        error_message=None,
        started_at=None,
        finished_at=None,
        worker_id=None,
        heartbeat_at=None,
    )
    if not won:
        return "it left FAILED meanwhile"
    jobs.add_log(
        session=session,
        job_id=job.id,
        level="WARNING",
        message=f"attempt {attempt} queued: resumes from checkpoint {checkpoint.id} (epoch {checkpoint.epoch})",
    )
    return checkpoint


def _resuming(job: Job, checkpoint: Checkpoint) -> dict[str, Any] | None:
    """The job's stored plan, resuming from ``checkpoint`` (None stays None: a job queued before plans were
    stored is planned again from its request, whose ``resume_from`` names the checkpoint)."""
    if job.plan is None:
        return None
    planned = plans.load(TorchPlan, job.plan)
    point = ResumePoint(checkpoint_id=checkpoint.id, path=checkpoint.uri, epoch=checkpoint.epoch, job_id=job.id)
    return plans.dump(replace(planned, resume=point))


def send_retry(*, db: sessionmaker[Session], send: Send, job_id: str, attempt: int, queue: str) -> bool:
    """Send the message of a queued retry and note that it went out. When the broker refuses it, the retry stays
    QUEUED with ``sent: false`` and the next reconciler pass tries again; returns whether it went out."""
    try:
        send(task_name(JobType.TRAIN, "torch"), job_id, queue)
    except Exception:
        log.exception("could not queue attempt %d of job %s on %s; the reconciler will try again", attempt, job_id,
                      queue)  # fmt: skip
        return False
    with transaction(db) as session:
        attempts.mark_sent(session=session, job_id=job_id, attempt=attempt)
    return True
