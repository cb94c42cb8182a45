"""Attempts that ended early, and the reconciler's pass that finds the ones whose driver died.

A running job's driver writes a heartbeat every second (app/jobs/watcher.py). A job in STARTING, RUNNING or
CANCELLING whose heartbeat is older than ``heartbeat_stale_s`` lost its driver, whichever process that was and
whether or not it comes back. Each such job is, in one guarded transition each (so two reconcilers on two drivers
never both act):

- CANCELLING: CANCELLED (the user asked for it; the driver is gone);
- otherwise its attempt ends FAILED with reason DRIVER_LOST, and the job goes back to QUEUED as attempt + 1 while
  attempts remain (:func:`retry`; what the next attempt runs, from a checkpoint or from scratch, is
  app/services/resume.py), on the queue its lost attempt was taken from (drivers with different queues may share
  the database).

The runner ends attempts the same way when Spark loses a worker (WORKER_LOST) or the artifact store fails
(STORAGE_FULL, STORAGE_UNAVAILABLE: the retry's message waits ``retry_delay_s``), and a driver that is told to stop
hands its running jobs back at once (DRIVER_STOPPED, :func:`hand_back`). The job keeps its id; ``attempts`` has one
entry per attempt, and an attempt that ended early says how. A retry whose message was not sent yet (delayed, or
refused by the broker) stays QUEUED with ``sent: false``; a later pass sends it (a second copy of a message is
harmless: only one delivery wins QUEUED -> STARTING).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.core.jobstates import ACTIVE, JobStatus
from app.db.base import utcnow
from app.db.models import Job
from app.db.session import transaction
from app.services import attempts, jobs, resume
from workers.families import task_name

log = logging.getLogger(__name__)

Send = Callable[[str, str, str], None]
"""``send(task_name, job_id, queue)``: put a job's message on a queue; raises when the broker refuses it."""


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def reconcile(
    *, db: sessionmaker[Session], send: Send, stale_after_s: float, default_queue: str, look_for_lost: bool = True
) -> list[dict[str, Any]]:
    """One pass; returns what was done to each job (for logs and tests). ``default_queue`` is for jobs whose queue
    was never recorded (started before queues were recorded). ``look_for_lost=False`` only sends what is due (the
    reconciler skips lost jobs right after the database was away: heartbeats could not be written meanwhile)."""
    now = utcnow()
    cutoff = now - timedelta(seconds=stale_after_s)
    with db() as session:
        stmt = select(Job.id).where(
            Job.status.in_([s.value for s in ACTIVE]),
            (Job.heartbeat_at.is_(None)) | (Job.heartbeat_at < cutoff),
        )
        lost = list(session.execute(stmt).scalars()) if look_for_lost else []
        unsent = attempts.unsent_retries(session=session, older_than=cutoff, now=now)
    actions = [a for job_id in lost if (a := _reconcile_one(db, send, job_id, now, cutoff, default_queue))]
    for job_id, attempt, queue, task in unsent:
        if send_retry(db=db, send=send, job_id=job_id, attempt=attempt, queue=queue or default_queue, task=task):
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
        message = (
            f"driver {job.worker_id or '?'} stopped sending heartbeats "
            f"(last at {_iso(beat) or 'never'}); the job's driver process is gone"
        )
        outcome = end_and_retry(session=session, job=job, reason="DRIVER_LOST", message=message, now=now,
                                sources=[JobStatus(job.status)])  # fmt: skip
    return deliver(db=db, send=send, job_id=job_id, outcome=outcome, default_queue=default_queue)


def end_and_retry(
    *,
    session: Session,
    job: Job,
    reason: str,
    message: str,
    now: datetime,
    sources: Collection[JobStatus],
    only_if: Mapping[str, Any] | None = None,
    retry_delay_s: float = 0.0,
) -> dict[str, Any] | None:
    """End the job's current attempt for ``reason`` (one guarded transition) and queue the next one when the
    reason allows it and attempts remain. A CANCELLING job ends CANCELLED instead: its user asked it to stop.
    Returns what was done, with what :func:`deliver` needs to send the retry's message after the commit; None when
    the transition lost (the job is no longer in ``sources``, or not ``only_if``'s)."""
    if job.status == JobStatus.CANCELLING:
        record = _ended(job, now, "CANCELLED", reason, message)
        won = jobs.transition(session=session, job_id=job.id, sources=[JobStatus.CANCELLING],
                              target=JobStatus.CANCELLED, only_if=only_if, finished_at=now, error_reason="CANCELLED",
                              error_message=f"cancelled on request; {message}", attempts=record)  # fmt: skip
        return {"job_id": job.id, "action": "cancelled"} if won else None
    sources = [s for s in sources if s != JobStatus.CANCELLING]
    if not end_attempt(session=session, job=job, sources=sources, reason=reason, message=message, now=now,
                       only_if=only_if):  # fmt: skip
        return None
    session.refresh(job)
    queued = retry(session=session, job=job, now=now, reason=reason, delay_s=retry_delay_s)
    if isinstance(queued, str):
        return {"job_id": job.id, "action": "failed", "why": queued}
    return {"job_id": job.id, "action": "retried", "attempt": job.attempt, "how": queued.how,
            "queue": attempts.queue_of(job), "task": task_name(job.type, job.framework or ""),
            "send": retry_delay_s <= 0}  # fmt: skip


def deliver(
    *, db: sessionmaker[Session], send: Send, job_id: str, outcome: dict[str, Any] | None, default_queue: str
) -> dict[str, Any] | None:
    """After :func:`end_and_retry` committed: send the retry's message unless it waits for a later pass."""
    if outcome is not None and outcome["action"] == "retried" and outcome.pop("send"):
        queue = outcome["queue"] or default_queue
        send_retry(db=db, send=send, job_id=job_id, attempt=outcome["attempt"], queue=queue, task=outcome["task"])
    return outcome


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
    sources: Collection[JobStatus],
    reason: str,
    message: str,
    now: datetime,
    only_if: Mapping[str, Any] | None = None,
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


def retry(*, session: Session, job: Job, now: datetime, reason: str, delay_s: float = 0.0) -> resume.NextAttempt | str:
    """A job whose attempt just ended FAILED for ``reason`` goes back to QUEUED as attempt + 1 when the reason is
    not the job's fault (resume.RETRYABLE) and attempts remain; returns what the next attempt runs, or why the job
    stays FAILED. The caller sends the message after the commit (:func:`deliver`); with ``delay_s`` a reconciler
    pass sends it once that much time has passed."""
    if reason not in resume.RETRYABLE:
        return f"{reason} is not retried"
    progressed = reason in resume.FREE_AFTER_PROGRESS and resume.made_progress(session, job)
    free = reason in resume.FREE or progressed
    if job.attempt >= job.max_attempts and not free:
        return "no attempts left"
    try:
        nxt = resume.next_attempt(session, job)
    except (TypeError, ValueError, KeyError) as exc:
        return f"its stored plan cannot be read ({type(exc).__name__}: {exc})"
    attempt = job.attempt + 1
    queue = attempts.queue_of(job)
    entry: dict[str, Any] = {"queued_at": _iso(now), "sent": False}
    if queue is not None:
        entry["queue"] = queue
    if delay_s > 0:
        entry["not_before"] = _iso(now + timedelta(seconds=delay_s))
    won = jobs.transition(
        session=session,
        job_id=job.id,
        sources=[JobStatus.FAILED],
        target=JobStatus.QUEUED,
        attempt=attempt,
        max_attempts=job.max_attempts + 1 if free else job.max_attempts,
        attempts=attempts.update_attempt(job, attempt, **entry),
        request=nxt.request,
        plan=nxt.plan,
        progress=0.0,
        progress_message=None,
        error_reason=None,
        error_message=None,
        started_at=None,
        finished_at=None,
        worker_id=None,
        heartbeat_at=None,
        waiting_for=None,
    )
    if not won:
        return "it left FAILED meanwhile"
    when = f" in {delay_s:.0f} s" if delay_s > 0 else ""
    cost = ""
    if free:
        cost = " (it saved progress first: this costs no attempt)" if progressed else " (a stop costs no attempt)"
    jobs.add_log(session=session, job_id=job.id, level="WARNING", message=f"attempt {attempt} queued{when}: "
                 f"{nxt.how}{cost}")  # fmt: skip
    session.refresh(job)
    return nxt


def send_retry(*, db: sessionmaker[Session], send: Send, job_id: str, attempt: int, queue: str, task: str) -> bool:
    """Send the message of a queued retry and note that it went out. When the broker refuses it, the retry stays
    QUEUED with ``sent: false`` and the next reconciler pass tries again; returns whether it went out."""
    try:
        send(task, job_id, queue)
    except Exception:
        log.exception("could not queue attempt %d of job %s on %s; the reconciler will try again", attempt, job_id,
                      queue)  # fmt: skip
        return False
    with transaction(db) as session:
        attempts.mark_sent(session=session, job_id=job_id, attempt=attempt)
    return True


def hand_back(
    *, db: sessionmaker[Session], send: Send, job_id: str, worker_id: str, attempt: int, default_queue: str
) -> dict[str, Any] | None:
    """A driver that was told to stop gives a job it runs back at once: the attempt ends DRIVER_STOPPED and the job
    is queued again (a stop costs no attempt), or CANCELLED if a cancel was on its way. Guarded by the driver and
    attempt, so a job that already moved on is left alone. Returns what was done (None: nothing)."""
    now = utcnow()
    with transaction(db) as session:
        job = session.get(Job, job_id, with_for_update=True)
        if job is None or job.status not in {s.value for s in ACTIVE}:
            return None
        message = f"driver {worker_id} was told to stop; the attempt was handed back"
        outcome = end_and_retry(session=session, job=job, reason="DRIVER_STOPPED", message=message, now=now,
                                sources=ACTIVE, only_if={"worker_id": worker_id, "attempt": attempt})  # fmt: skip
    return deliver(db=db, send=send, job_id=job_id, outcome=outcome, default_queue=default_queue)
