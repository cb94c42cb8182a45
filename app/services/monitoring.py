"""What ``GET /metrics`` reads from the database at each scrape: jobs by type, family and state, the durations of
finished jobs as histogram buckets, and the live figures of running torch jobs. Aggregated in SQL, so a scrape costs
a few indexed queries however many jobs there are (``bench.console`` measures it at 10,000 jobs)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Float, case, cast, func, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from app.core.jobstates import TERMINAL, JobStatus
from app.db.models import Job, JobMetric

DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0)
"""Seconds: from an online-sized evaluation to a long training run."""
WIRE_KEYS = ("wire_bytes", "bytes")
"""The trainer's bytes sent per worker and step: ``wire_bytes`` (issue 14's name), else the older ``bytes``."""
RATE_WINDOW_S = 10.0


@dataclass(frozen=True)
class DurationHistogram:
    buckets: list[int]
    """Cumulative counts, one per bound of DURATION_BUCKETS, then +Inf."""
    total: float
    count: int


@dataclass
class TorchLive:
    """A running torch job's newest figures, over its workers (None where the trainer has not reported it)."""

    job_id: str
    name: str | None
    samples_per_s: float | None = None
    tau: float | None = None
    sparsity: float | None = None
    wire_bytes_per_s: float | None = None
    workers: int = 0


def family(framework: str | None) -> str:
    return framework or "none"


def job_counts(*, session: Session) -> list[tuple[str, str, str, int]]:
    """``(type, family, status, count)`` for every combination present."""
    stmt = select(Job.type, Job.framework, Job.status, func.count()).group_by(Job.type, Job.framework, Job.status)
    return [(t, family(f), s, int(n)) for t, f, s, n in session.execute(stmt)]


def _seconds(session: Session) -> ColumnElement[Any]:
    if session.get_bind().dialect.name == "sqlite":
        return (func.julianday(Job.finished_at) - func.julianday(Job.started_at)) * 86400.0
    return cast(func.extract("epoch", Job.finished_at - Job.started_at), Float)


def job_durations(*, session: Session) -> dict[tuple[str, str], DurationHistogram]:
    """Histograms of ``finished_at - started_at`` of finished jobs that started, by ``(type, family)``."""
    seconds = _seconds(session)
    columns = [func.count(), func.coalesce(func.sum(seconds), 0.0)]
    columns += [func.sum(case((seconds <= bound, 1), else_=0)) for bound in DURATION_BUCKETS]
    stmt = (
        select(Job.type, Job.framework, *columns)
        .where(Job.status.in_([s.value for s in TERMINAL]), Job.started_at.is_not(None), Job.finished_at.is_not(None))
        .group_by(Job.type, Job.framework)
    )
    out: dict[tuple[str, str], DurationHistogram] = {}
    for row in session.execute(stmt):
        job_type, framework, count, total, *below = row
        out[(job_type, family(framework))] = DurationHistogram(
            buckets=[int(b or 0) for b in below] + [int(count)], total=float(total or 0.0), count=int(count)
        )
    return out


def running_torch(*, session: Session, recent: int = 400) -> list[TorchLive]:
    """The newest samples/s (summed over workers), τ and sparsity (averaged over workers) and wire bytes per second
    of every running torch training job, from its last ``recent`` points of those keys."""
    running = session.execute(
        select(Job.id, Job.name).where(
            Job.status == JobStatus.RUNNING.value, Job.type == "train", Job.framework == "torch"
        )
    ).all()
    out = []
    keys = ("samples_per_s", "tau", "sparsity")
    for job_id, name in running:
        live = TorchLive(job_id=job_id, name=name)
        rows = session.execute(
            select(JobMetric.key, JobMetric.worker, JobMetric.value)
            .where(JobMetric.job_id == job_id, JobMetric.key.in_(keys))
            .order_by(JobMetric.id.desc())
            .limit(recent)
        ).all()
        newest: dict[str, dict[int | None, float]] = defaultdict(dict)
        for key, worker, value in rows:
            newest[key].setdefault(worker, float(value))
        if newest["samples_per_s"]:
            live.samples_per_s = sum(newest["samples_per_s"].values())
        for key in ("tau", "sparsity"):
            if newest[key]:
                setattr(live, key, sum(newest[key].values()) / len(newest[key]))
        live.workers = max((len(v) for v in newest.values()), default=0)
        live.wire_bytes_per_s = _wire_rate(session, job_id)
        out.append(live)
    return out


def _wire_rate(session: Session, job_id: str, limit: int = 4000) -> float | None:
    """Bytes the job's workers sent per second over the last RATE_WINDOW_S seconds of points. Points are stored in
    batches (the trainer flushes twice a second), so the rate is the bytes of the batches after the oldest one in the
    window over the time since that one."""
    for key in WIRE_KEYS:
        rows: Sequence[tuple[float, datetime]] = [
            (float(v), t)
            for v, t in session.execute(
                select(JobMetric.value, JobMetric.time)
                .where(JobMetric.job_id == job_id, JobMetric.key == key)
                .order_by(JobMetric.step.desc())
                .limit(limit)
            )
        ]
        if not rows:
            continue
        newest = max(t for _, t in rows)
        window = [(v, t) for v, t in rows if (newest - t).total_seconds() <= RATE_WINDOW_S]
        oldest = min(t for _, t in window)
        span = (newest - oldest).total_seconds()
        if span <= 0:
            return None
        return sum(v for v, t in window if t > oldest) / span
    return None
