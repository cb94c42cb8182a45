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

A tune job that ends here (CANCELLED, or FAILED for good) takes its trials with it (:func:`cancel_trials`): its own
runner, which cancels them otherwise, died with its driver. One job whose stored row cannot be read (a malformed
plan or ``attempts``) ends FAILED with reason ``UNREADABLE_JOB`` on its own (a savepoint per job); left in place it
would fail every later pass, and no other lost job would ever be recovered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import Conflict
from app.core.jobstates import ACTIVE, JobStatus, JobType
from app.db.base import utcnow
from app.db.models import Job
from app.db.session import savepoint, transaction, unavailable
from app.services import attempts, jobs, resume
from workers.families import task_name

log = logging.getLogger(__name__)

Send = Callable[[str, str, str], None]
"""``send(task_name, job_id, queue)``: put a job's message on a queue; raises when the broker refuses it."""

UNREADABLE = "UNREADABLE_JOB"
"""The reason of a job whose stored row (plan, ``attempts``) cannot be read: it cannot go on, only be resubmitted."""


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
        unsent, unreadable = attempts.unsent_retries(session=session, older_than=cutoff, now=now)
    actions: list[dict[str, Any]] = []
    for job_id in lost:
        if a := _contained(job_id, partial(_reconcile_one, db, send, job_id, now, cutoff, default_queue)):
            actions.append(a)
    for job_id, attempt, what in unreadable:
        if a := _contained(job_id, partial(_fail_unsent, db, job_id, attempt, what, now)):
            actions.append(a)
    for job_id, attempt, queue, task in unsent:
        if send_retry(db=db, send=send, job_id=job_id, attempt=attempt, queue=queue or default_queue, task=task):
            actions.append({"job_id": job_id, "action": "sent again", "attempt": attempt})
    return actions


def _contained(job_id: str, work: Callable[[], dict[str, Any] | None]) -> dict[str, Any] | None:
    """``work()`` on one job, whose failure (say the write that fails a job that cannot be read fails too) is logged
    and does not stop the pass for the other jobs. A database that is away stops the pass: every job would fail."""
    try:
        return work()
    except Exception as exc:
        if unavailable(exc):
            raise
        log.exception("the reconciler could not handle job %s; the pass goes on with the other jobs", job_id)
        return None


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
        status = JobStatus(job.status)
        # as read: a heartbeat its driver, slow but alive, wrote since (PostgreSQL lets it) keeps the job its own
        as_read = {"worker_id": job.worker_id, "attempt": job.attempt, "heartbeat_at": beat}
        try:
            with savepoint(session):
                outcome = end_and_retry(session=session, job=job, reason="DRIVER_LOST", message=message, now=now,
                                        sources=[status], only_if=as_read)  # fmt: skip
        except Exception as exc:  # what end_and_retry wrote is undone; the job fails here instead, on its own
            if unavailable(exc):
                raise
            what = f"its driver was lost, and its stored row (plan, request or attempts) cannot be read ({_error(exc)})"
            return fail_unreadable(session=session, job_id=job_id, sources=[status], what=what, now=now)
    return deliver(db=db, send=send, job_id=job_id, outcome=outcome, default_queue=default_queue)


def _unreadable_message(what: str) -> str:
    return f"{what}; the job cannot go on: submit it again"


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def _fail_unsent(
    db: sessionmaker[Session], job_id: str, attempt: int, what: str, now: datetime
) -> dict[str, Any] | None:
    with transaction(db) as session:
        what = f"attempt {attempt} was queued again, but {what} cannot be read, so its message is never sent"
        return fail_unreadable(session=session, job_id=job_id, sources=[JobStatus.QUEUED], what=what, now=now,
                               only_if={"attempt": attempt})  # fmt: skip


def fail_unreadable(
    *,
    session: Session,
    job_id: str,
    sources: Collection[JobStatus],
    what: str,
    now: datetime,
    only_if: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """FAILED with :data:`UNREADABLE`, saying ``what`` could not be read and to submit the job again: nothing that
    reads its row again can do better. Writes no ``attempts`` (they may be what is malformed; they are kept as they
    are, for a look). A tune job's trials are cancelled with it."""
    message = _unreadable_message(what)
    won = jobs.transition(session=session, job_id=job_id, sources=sources, target=JobStatus.FAILED, only_if=only_if,
                          finished_at=now, error_reason=UNREADABLE, error_message=message,
                          progress_message=f"failed: {UNREADABLE}")  # fmt: skip
    if not won:
        return None
    jobs.add_log(session=session, job_id=job_id, level="ERROR", message=message)
    log.error("job %s failed: %s", job_id, message)
    outcome: dict[str, Any] = {"job_id": job_id, "action": "failed", "why": message}
    return _with_trials(outcome, cancel_trials(session=session, job_id=job_id, ended="FAILED"))


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
    the transition lost (the job is no longer in ``sources``, or not ``only_if``'s). A tune job that ends here
    (CANCELLED, or FAILED for good) cancels its trials in the same transaction (:func:`cancel_trials`)."""
    if job.status == JobStatus.CANCELLING:
        record = _ended(job, now, "CANCELLED", reason, message)
        won = jobs.transition(session=session, job_id=job.id, sources=[JobStatus.CANCELLING],
                              target=JobStatus.CANCELLED, only_if=only_if, finished_at=now, error_reason="CANCELLED",
                              error_message=f"cancelled on request; {message}", attempts=record)  # fmt: skip
        if not won:
            return None
        return _with_trials({"job_id": job.id, "action": "cancelled"}, _end_tune(session, job, JobStatus.CANCELLED))
    sources = [s for s in sources if s != JobStatus.CANCELLING]
    if not end_attempt(session=session, job=job, sources=sources, reason=reason, message=message, now=now,
                       only_if=only_if):  # fmt: skip
        return None
    session.refresh(job)
    queued = retry(session=session, job=job, now=now, reason=reason, delay_s=retry_delay_s)
    if isinstance(queued, str):
        return _with_trials(
            {"job_id": job.id, "action": "failed", "why": queued}, _end_tune(session, job, JobStatus.FAILED)
        )
    return {"job_id": job.id, "action": "retried", "attempt": job.attempt, "how": queued.how,
            "queue": attempts.queue_of(job), "task": task_name(job.type, job.framework or ""),
            "send": retry_delay_s <= 0}  # fmt: skip


def cancel_trials(*, session: Session, job_id: str, ended: str) -> list[str]:
    """A tune job that just ended ``ended`` asks its trials that have not finished to stop, as a user's cancel
    does (:func:`jobs.request_cancel`: a queued trial ends CANCELLED at once, a running one goes to CANCELLING and
    its driver's watcher stops it), and says so in its log; returns their job ids. Its own runner cancels them when
    it ends the job itself; a job ended here lost its runner, and its trials would otherwise run on and register
    model versions of a search that is over. A tune job queued again keeps them: its next attempt attaches to them."""
    stmt = select(Job.id, Job.trial).where(
        Job.parent_id == job_id,
        Job.status.in_([JobStatus.QUEUED.value, JobStatus.STARTING.value, JobStatus.RUNNING.value]),
    )
    cancelled: list[tuple[int | None, str]] = []
    for trial_id, number in session.execute(stmt.order_by(Job.trial)).all():
        try:
            jobs.request_cancel(session=session, job_id=trial_id)
        except Conflict:  # it finished meanwhile
            continue
        cancelled.append((number, trial_id))
    if cancelled:
        names = ", ".join(f"trial {number} (job {trial_id})" for number, trial_id in cancelled)
        message = f"the tune job ended {ended}: cancelled its trials that had not finished: {names}"
        jobs.add_log(session=session, job_id=job_id, level="WARNING", message=message)
        log.warning("tune job %s ended %s: cancelled %d trials", job_id, ended, len(cancelled))
    return [trial_id for _, trial_id in cancelled]


def _end_tune(session: Session, job: Job, ended: JobStatus) -> list[str]:
    """:func:`cancel_trials` of a tune job that is ``ended`` now (not one that a racing writer moved on)."""
    if job.type != JobType.TUNE or session.scalar(select(Job.status).where(Job.id == job.id)) != ended.value:
        return []
    return cancel_trials(session=session, job_id=job.id, ended=ended.value)


def _with_trials(outcome: dict[str, Any], trials: list[str]) -> dict[str, Any]:
    return {**outcome, "trials_cancelled": trials} if trials else outcome


def deliver(
    *, db: sessionmaker[Session], send: Send, job_id: str, outcome: dict[str, Any] | None, default_queue: str
) -> dict[str, Any] | None:
    """After :func:`end_and_retry` committed: send the retry's message unless it waits for a later pass."""
    if outcome is not None and outcome["action"] == "retried" and outcome.pop("send"):
        queue = outcome["queue"] or default_queue
        send_retry(db=db, send=send, job_id=job_id, attempt=outcome["attempt"], queue=queue, task=outcome["task"])
    return outcome


def _ended(job: Job, now: datetime, status: str, reason: str, message: str) -> list[dict[str, Any]]:
    """The job's ``attempts`` with its current attempt marked as ended (the job's ``started_at`` is its first
    attempt's; the runner wrote this one's start in its entry)."""
    own = attempts.entry_of(job, job.attempt)
    return attempts.update_attempt(
        job,
        job.attempt,
        worker_id=job.worker_id,
        started_at=own.get("started_at") or _iso(job.started_at),
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
    """FAILED with ``reason``, the attempt recorded in ``attempts`` and the job's log: one guarded transition. Its
    progress message says it failed (as app/jobs/settle.py's ``ended_message``), not what the attempt said last
    ("epoch 3 of 10" on a job its lost driver left): :func:`retry` replaces it when the job is queued again."""
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
        progress_message=f"failed: {reason}",
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
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a malformed plan, of whatever shape
        why = f"its stored plan cannot be read ({_error(exc)})"
        _unreadable_after_failed(session, job.id, f"attempt {job.attempt} ended {reason}, and {why}")
        return why
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
        progress_message=f"attempt {attempt} queued: {nxt.how}",  # what `show` and the jobs page say meanwhile
        error_reason=None,
        error_message=None,
        finished_at=None,  # started_at stays the first attempt's: a job's duration counts every attempt
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


def _unreadable_after_failed(session: Session, job_id: str, what: str) -> None:
    """The job that just ended FAILED says why it stays so (:data:`UNREADABLE`), rather than only that its attempt
    ended (FAILED -> FAILED is no transition: its columns are updated in place)."""
    message = _unreadable_message(what)
    session.execute(update(Job).where(Job.id == job_id, Job.status == JobStatus.FAILED.value).values(
        error_reason=UNREADABLE, error_message=message).execution_options(synchronize_session=False))  # fmt: skip
    jobs.add_log(session=session, job_id=job_id, level="ERROR", message=message)
    log.error("job %s failed: %s", job_id, message)


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
