"""The history of a job's attempts, and where a job's messages go.

A job is retried (reconciler, lost workers) on the queue its attempt was taken from, not on whatever queue
the retrying driver consumes: drivers with different queues can share one database. The queue is kept in
the job's ``attempts`` list (no column of its own yet), one entry per attempt that started or was queued as a
retry: ``{"attempt": n, "queue": q, ...}``; the runner that takes an attempt writes the queue its message came
from, and an attempt that ended early also says how (``status``, ``error_reason``, ...). An attempt queued by
a retry says whether its message went out (``sent``), so a retry whose message the broker refused is sent
again by the next reconciler pass instead of staying QUEUED for ever; a retry that must wait (a storage failure)
says until when (``not_before``), and the first pass after that sends it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.core.jobstates import TERMINAL, JobStatus
from app.db.models import Job
from workers.families import task_name


def _entry(history: list[dict[str, Any]], attempt: int) -> dict[str, Any] | None:
    return next((e for e in reversed(history) if e.get("attempt") == attempt), None)


def entry_of(job: Job, attempt: int) -> dict[str, Any]:
    """What the job's ``attempts`` say of ``attempt`` (empty when nothing yet)."""
    return dict(_entry(list(job.attempts or []), attempt) or {})


def queue_of(job: Job) -> str | None:
    """The queue of the job's current attempt, else the newest one recorded (None: never recorded)."""
    history = list(job.attempts or [])
    current = _entry(history, job.attempt)
    if current is not None and current.get("queue"):
        return str(current["queue"])
    return next((str(e["queue"]) for e in reversed(history) if e.get("queue")), None)


def message_sent(job: Job) -> bool:
    """False while the current attempt's message has not gone out (a retry due later, or one the broker refused)."""
    entry = _entry(list(job.attempts or []), job.attempt)
    return entry is None or bool(entry.get("sent", True))


def update_attempt(job: Job, attempt: int, **values: Any) -> list[dict[str, Any]]:
    """The job's ``attempts`` with the entry of ``attempt`` updated by ``values`` (appended when missing)."""
    history = [dict(e) for e in (job.attempts or [])]
    entry = _entry(history, attempt)
    if entry is None:
        history.append({"attempt": attempt, **values})
    else:
        entry.update(values)
    return history


def mark_sent(*, session: Session, job_id: str, attempt: int) -> None:
    """Note that the retry's message went out. The message may already have been taken by then: a runner's
    STARTING (with its ``worker_id`` in the attempt's entry) must be read here, not overwritten. So the row's write
    lock comes first: a no-op UPDATE, because SQLite has no ``SELECT ... FOR UPDATE`` (a plain read there could
    predate the runner's commit, and this write would then put the entry back without it)."""
    session.execute(update(Job).where(Job.id == job_id).values(attempt=Job.attempt).execution_options(
        synchronize_session=False))  # fmt: skip
    job = session.get(Job, job_id, populate_existing=True)
    if job is not None and job.attempt == attempt:
        job.attempts = update_attempt(job, attempt, sent=True)


Unsent = tuple[str, int, str | None, str]
"""(job id, attempt, queue, task name) of a retry whose message is due."""
Unreadable = tuple[str, int, str]
"""(job id, attempt, what could not be read) of a retry whose entry in ``attempts`` is malformed."""


def unsent_retries(*, session: Session, older_than: datetime, now: datetime) -> tuple[list[Unsent], list[Unreadable]]:
    """Attempts still QUEUED whose message never went out (a first one too: its driver died before the send),
    queued before ``older_than`` (a refused send), or due at ``now`` (a delayed retry). Second, the ones whose
    entry cannot be read (a ``not_before`` that is no time): read row by row, so that one malformed entry does not
    hide every other retry (the caller fails those jobs; left alone they would stay QUEUED for ever, and fail every
    pass that reads them)."""
    rows = session.scalars(select(Job).where(Job.status == JobStatus.QUEUED.value)).all()
    due: list[Unsent] = []
    unreadable: list[Unreadable] = []
    for job in rows:
        try:
            if _due(job, older_than, now):
                due.append((job.id, job.attempt, queue_of(job), task_name(job.type, job.framework or "")))
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            unreadable.append((job.id, job.attempt, f"the entry of attempt {job.attempt} in its attempts ({exc})"))
    return due, unreadable


def _due(job: Job, older_than: datetime, now: datetime) -> bool:
    entry = _entry(list(job.attempts or []), job.attempt)
    if entry is None or entry.get("sent", True):
        return False
    if entry.get("not_before") is not None:
        return _time(entry, "not_before") <= now
    return entry.get("queued_at") is None or _time(entry, "queued_at") < older_than


def _time(entry: dict[str, Any], key: str) -> datetime:
    """The entry's time ``key``; a ValueError that names the key when it is no time."""
    try:
        return datetime.fromisoformat(entry[key])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{key} {entry[key]!r} is not a time: {exc}") from exc


def history(job: Job) -> list[dict[str, Any]]:
    """The ``attempts`` a reader sees: as stored, with the attempt that finished the job closed the way an attempt
    that ended early is (``ended_at``, ``status``, and the error when it failed). Runners write the finish to the job's
    own columns in one conditional UPDATE; the history's last entry is filled from them here rather than by a second
    write in every path that finishes a job."""
    out = [{k: _z(v) for k, v in e.items()} for e in (job.attempts or [])]
    if JobStatus(job.status) not in TERMINAL or job.finished_at is None:
        return out
    entry = _entry(out, job.attempt)
    if entry is None or "ended_at" in entry:
        return out
    entry.update(ended_at=_z(job.finished_at.isoformat()), status=job.status)
    if job.error_reason:
        entry.update(error_reason=job.error_reason, error_message=job.error_message or "")
    return out


def _z(value: Any) -> Any:
    """A stored time as the job's own times are written (``...Z``); the entries keep ``isoformat()``'s
    ``+00:00``."""
    if isinstance(value, str) and value.endswith("+00:00") and value[:4].isdigit():
        return value[:-6] + "Z"
    return value
