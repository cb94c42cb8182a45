"""A job's events, read from the database: its state (status, progress, error, result), its metric points and its
log lines, in the Server-Sent Events format of ``GET /jobs/{id}/events`` and ``GET /jobs/{id}/logs?follow=true``.

Every event carries an id, the :class:`Cursor` after it: the last metric point and log line sent (by their ids) and a
fingerprint of the last state sent. A client that reconnects with ``Last-Event-ID`` resumes exactly there. Metric
points and log lines are followed by id, which is exact because one job's points and lines are written by one writer
at a time, each batch committed before the next is written (``app/jobs/context.py``), so ids become visible in order.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import orjson
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.core.auth import Caller
from app.core.errors import BadRequest
from app.core.jobstates import TERMINAL, JobStatus
from app.db.models import Job, JobLog, JobMetric
from app.services.access import job_of

POINTS_PER_EVENT = 500
LINES_PER_EVENT = 200
_CURSOR = re.compile(r"^(\d{1,19})-(\d{1,19})-([0-9a-f]{1,32})$")


@dataclass(frozen=True)
class Cursor:
    """Where a client is: metric points with ``metric`` < id and log lines with ``log`` < id are still to come, and
    ``state`` is the fingerprint of the last state it got ("0": none)."""

    metric: int = 0
    log: int = 0
    state: str = "0"

    def text(self) -> str:
        return f"{self.metric}-{self.log}-{self.state}"

    @classmethod
    def parse(cls, text: str | None) -> Cursor:
        """A ``Last-Event-ID`` header; None or empty starts at the job's beginning."""
        if not text or not text.strip():
            return cls()
        match = _CURSOR.match(text.strip())
        if match is None:
            raise BadRequest(
                "Last-Event-ID is not an event id of this stream (expected METRIC-LOG-STATE, e.g. 120-4-3fa9c01b); "
                "reconnect without it to start from the job's beginning."
            )
        return cls(int(match.group(1)), int(match.group(2)), match.group(3))


@dataclass(frozen=True)
class JobState:
    """What the ``state`` event says, and whether the job has ended."""

    data: dict[str, Any]
    fingerprint: str
    ended: bool


@dataclass(frozen=True)
class Window:
    """What one read found after a cursor: the state, new metric points and log lines (oldest first), and whether
    more were left for the next read."""

    state: JobState | None
    metrics: list[dict[str, Any]]
    logs: list[dict[str, Any]]
    more: bool


def read_state(*, session: Session, job_id: str) -> JobState | None:
    job = session.get(Job, job_id, populate_existing=True)
    if job is None:
        return None
    # The job's JSON is built apart, in app/api/job_views.py (to_job_read): a field added here goes there too.
    data = {
        "id": job.id,
        "status": job.status,
        "progress": job.progress,
        "progress_message": job.progress_message,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "worker_id": job.worker_id,
        "waiting_for": job.waiting_for,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "error": {"reason": job.error_reason, "message": job.error_message or ""} if job.error_reason else None,
        "model": {"name": job.model_name, "version": job.model_version} if job.model_version else None,
        "result": job.result,
    }
    fingerprint = hashlib.blake2b(orjson.dumps(data), digest_size=6).hexdigest()
    return JobState(data=data, fingerprint=fingerprint, ended=JobStatus(job.status) in TERMINAL)


def head(*, session: Session, job_id: str) -> tuple[int, int]:
    """The newest metric point's and log line's ids of a job (0 when none)."""
    metric = session.scalar(select(func.max(JobMetric.id)).where(JobMetric.job_id == job_id))
    line = session.scalar(select(func.max(JobLog.id)).where(JobLog.job_id == job_id))
    return int(metric or 0), int(line or 0)


def read_window(*, session: Session, job_id: str, after: Cursor, upto: Cursor | None = None, limit: int) -> Window:
    """Points and lines after ``after`` (and at most up to ``upto``'s ids), ``limit`` of each. The state is read
    first: when it says the job ended, every point and line the job wrote is already visible to the reads after it."""
    state = read_state(session=session, job_id=job_id)
    points = select(
        JobMetric.id, JobMetric.key, JobMetric.step, JobMetric.epoch, JobMetric.value, JobMetric.worker, JobMetric.time
    ).where(JobMetric.job_id == job_id, JobMetric.id > after.metric)
    lines = select(JobLog.id, JobLog.time, JobLog.level, JobLog.message).where(
        JobLog.job_id == job_id, JobLog.id > after.log
    )
    if upto is not None:
        points = points.where(JobMetric.id <= upto.metric)
        lines = lines.where(JobLog.id <= upto.log)
    metrics = [dict(row._mapping) for row in session.execute(points.order_by(JobMetric.id).limit(limit))]
    logs = [dict(row._mapping) for row in session.execute(lines.order_by(JobLog.id).limit(limit))]
    return Window(state=state, metrics=metrics, logs=logs, more=len(metrics) == limit or len(logs) == limit)


def _event(kind: str, cursor: Cursor, data: Any) -> bytes:
    data_json = orjson.dumps(data, option=orjson.OPT_UTC_Z | orjson.OPT_NAIVE_UTC)  # times end in Z, as elsewhere
    return b"id: %s\nevent: %s\ndata: %s\n\n" % (cursor.text().encode(), kind.encode(), data_json)


def render(
    window: Window, after: Cursor, *, state: JobState | None = None, final: bool = False
) -> tuple[list[tuple[str, bytes]], Cursor]:
    """The window as SSE events ``(kind, bytes)``, each with its id, and the cursor after the last one: metric
    points (``metrics``, up to 500 a event), log lines (``log``), the state when it changed (``state``; ``state``
    overrides the window's), and with ``final`` an ``end`` event."""
    out: list[tuple[str, bytes]] = []
    cursor = after
    for chunk in _chunks(window.metrics, POINTS_PER_EVENT):
        cursor = replace(cursor, metric=int(chunk[-1]["id"]))
        out.append(("metrics", _event("metrics", cursor, {"points": [_point(p) for p in chunk]})))
    for chunk in _chunks(window.logs, LINES_PER_EVENT):
        cursor = replace(cursor, log=int(chunk[-1]["id"]))
        out.append(("log", _event("log", cursor, {"lines": chunk})))
    state = state or window.state
    if state is not None and state.fingerprint != cursor.state:
        cursor = replace(cursor, state=state.fingerprint)
        out.append(("state", _event("state", cursor, state.data)))
    if final:
        status = state.data["status"] if state is not None else None
        out.append(("end", _event("end", cursor, {"status": status})))
    return out, cursor


def _point(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in ("id", "key", "step", "epoch", "value", "worker", "time")}


def _chunks(rows: list[dict[str, Any]], size: int) -> Iterable[list[dict[str, Any]]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def start(*, db: sessionmaker[Session], job_id: str, caller: Caller, after: Cursor, metrics: bool = True) -> Cursor:
    """Where a client's stream starts: checks that the caller sees the job (404 otherwise, as for any other owner's
    job) and that ``after`` is not ahead of the job's events. Without ``metrics`` (a log follower), it starts after
    the job's current points, which it will not be sent."""
    with db() as session:
        job = job_of(session=session, job_id=job_id, caller=caller)
        metric, line = head(session=session, job_id=job_id)
    # points a retried attempt dropped (app/services/checkpoints.py) were this job's: a cursor up to them is valid,
    # and the attempt's own points, written again from its checkpoint, have higher ids
    dropped = max((int(e.get("dropped_metric_ids_upto") or 0) for e in job.attempts or []), default=0)
    if after.metric > max(metric, dropped) or after.log > line:
        raise BadRequest(
            f"Last-Event-ID {after.text()} is ahead of this job's events (newest: {metric}-{line}); reconnect "
            "without it to start from the job's beginning."
        )
    return after if metrics else replace(after, metric=max(after.metric, metric))
