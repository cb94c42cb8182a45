"""What ``GET /metrics`` reads from the database at each scrape: jobs by type, family and state, the durations of
finished jobs as histogram buckets, and the live figures of running torch jobs. Aggregated in SQL, so a scrape costs
a few indexed queries however many jobs there are (``bench.console`` measures it at 10,000 jobs)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from itertools import pairwise
from typing import Any

from sqlalchemy import (
    BindParameter,
    CompoundSelect,
    Float,
    Select,
    String,
    Subquery,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal,
    select,
    union_all,
)
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql.elements import ColumnElement

from app.core.jobstates import TERMINAL, JobStatus
from app.db.models import Job, JobMetric
from app.db.session import unavailable

DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0)
"""Seconds: from an online-sized evaluation to a long training run."""
SENT_KEY = "wire_bytes_sent"
"""Each worker's bytes sent so far in the run, at the steps it reports (trainers since the step events are sampled,
see ``TorchConfig.metrics_interval_s``): the rate is its growth."""
WIRE_KEYS = ("wire_bytes", "bytes")
"""Older trainers, which reported every step: the bytes each worker sent in the step (``wire_bytes``, issue 14's
name), else the older ``bytes``; the rate is their sum."""
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


def job_figures(db: sessionmaker[Session]) -> tuple[Any, Any, list[TorchLive]] | None:
    """:func:`job_summary` and :func:`running_torch` in one session; None when the database does not answer (a
    scrape of ``/metrics`` was a 503 then, the driver's own figures lost with the rest)."""
    try:
        with db() as session:
            return (*job_summary(session=session), running_torch(session=session))
    except Exception as exc:
        if not unavailable(exc):
            raise
        return None


def job_summary(
    *, session: Session
) -> tuple[list[tuple[str, str, str, int]], dict[tuple[str, str], DurationHistogram]]:
    """``(type, family, status, count)`` for every combination present, and histograms of ``finished_at -
    started_at`` of finished jobs by ``(type, family)``: one scan of the jobs table, each job's duration computed once
    (a materialized CTE) and put in its bucket by one CASE."""
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    per_bucket: dict[tuple[str, str], list[int]] = {}
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for job_type, framework, status, where, n, total in session.execute(_summary_statement(_dialect(session))):
        counts[(job_type, family(framework), status)] += int(n)
        if where >= 0:
            key = (job_type, family(framework))
            per_bucket.setdefault(key, [0] * (len(DURATION_BUCKETS) + 1))[where] += int(n)
            totals[key] += float(total or 0.0)
    durations = {}
    for key, histogram in per_bucket.items():
        cumulative = [sum(histogram[: i + 1]) for i in range(len(histogram))]
        durations[key] = DurationHistogram(buckets=cumulative, total=totals[key], count=cumulative[-1])
    return [(*k, n) for k, n in counts.items()], durations


def _dialect(session: Session) -> str:
    return session.get_bind().dialect.name


@lru_cache(maxsize=4)
def _summary_statement(dialect: str) -> Select[Any]:
    """Built once per dialect: building a statement of this size costs a few milliseconds of Python, more than the
    database spends running it (``bench.console``)."""
    finished = and_(
        Job.status.in_([s.value for s in TERMINAL]), Job.started_at.is_not(None), Job.finished_at.is_not(None)
    )
    seconds = case((finished, _seconds(dialect)), else_=None).label("seconds")
    rows = select(Job.type, Job.framework, Job.status, seconds).cte("job_seconds").prefix_with("MATERIALIZED")
    bucket = case(
        (rows.c.seconds.is_(None), -1),
        *[(rows.c.seconds <= bound, i) for i, bound in enumerate(DURATION_BUCKETS)],
        else_=len(DURATION_BUCKETS),
    ).label("bucket")
    stmt = select(rows.c.type, rows.c.framework, rows.c.status, bucket, func.count(), func.sum(rows.c.seconds))
    return stmt.group_by(rows.c.type, rows.c.framework, rows.c.status, bucket)


def _seconds(dialect: str) -> ColumnElement[Any]:
    if dialect == "sqlite":
        return (func.julianday(Job.finished_at) - func.julianday(Job.started_at)) * 86400.0
    return cast(func.extract("epoch", Job.finished_at - Job.started_at), Float)


def running_torch(*, session: Session, newest: int = 64, wire: int = 512) -> list[TorchLive]:
    """The newest samples/s (summed over workers), τ and sparsity (averaged over workers) and wire bytes per second
    of every running torch training job: two queries however many jobs run. The second takes, by the (job_id, key,
    step) index, each job's last ``newest`` points of each key (a step of up to 64 workers) and its last ``wire``
    points of bytes sent, all in one UNION ALL, and reduces them in the database: one row per worker and key (its
    newest point), each worker's running total of bytes sent as stored (a few points a second per worker) or, from
    older trainers, one row per stored batch of bytes sent, so a scrape reads a few dozen rows per job."""
    running = session.execute(
        select(Job.id, Job.name).where(
            Job.status == JobStatus.RUNNING.value, Job.type == "train", Job.framework == "torch"
        )
    ).all()
    if not running:
        return []
    rows: dict[tuple[str, str], list[tuple[int | None, float, datetime]]] = defaultdict(list)
    params = {f"job_{i}": job_id for i, (job_id, _) in enumerate(running)}
    for job_id, key, worker, value, time in session.execute(_torch_statement(len(running), newest, wire), params):
        rows[(job_id, key)].append((worker, float(value), time))
    out = []
    for job_id, name in running:
        live = TorchLive(job_id=job_id, name=name)
        latest = {key: {w: v for w, v, _ in rows[(job_id, key)]} for key in LIVE_KEYS}
        if latest["samples_per_s"]:
            live.samples_per_s = sum(latest["samples_per_s"].values())
        for key in ("tau", "sparsity"):
            if latest[key]:
                setattr(live, key, sum(latest[key].values()) / len(latest[key]))
        live.workers = max(len(v) for v in latest.values())
        if rows[(job_id, SENT_KEY)]:
            live.wire_bytes_per_s = _sent_rate(rows[(job_id, SENT_KEY)])
        else:
            sent = next((rows[(job_id, key)] for key in WIRE_KEYS if rows[(job_id, key)]), [])
            live.wire_bytes_per_s = _wire_rate([(t, v) for _, v, t in sent])
        out.append(live)
    return out


LIVE_KEYS = ("samples_per_s", "tau", "sparsity")


@lru_cache(maxsize=32)
def _torch_statement(jobs: int, newest: int, wire: int) -> CompoundSelect:
    """The UNION ALL of :func:`running_torch` for ``jobs`` running jobs (bound as ``job_0``, ``job_1``, ...), built
    once per count: building it costs more Python than the database spends running it."""
    parts: list[Select[Any]] = []
    for i in range(jobs):
        job = bindparam(f"job_{i}", type_=String)
        for key in LIVE_KEYS:
            last = _last_points(job, key, newest)
            rank = func.row_number().over(partition_by=last.c.worker, order_by=last.c.step.desc()).label("rank")
            ranked = select(last.c.key, last.c.worker, last.c.value, last.c.time, rank).subquery()
            parts.append(
                select(job, ranked.c.key, ranked.c.worker, ranked.c.value, ranked.c.time).where(ranked.c.rank == 1)
            )
        last = _last_points(job, SENT_KEY, wire)
        parts.append(select(job, last.c.key, last.c.worker, last.c.value, last.c.time))
        for key in WIRE_KEYS:  # the trainer's points arrive in batches that share a time: one row per batch
            last = _last_points(job, key, wire)
            parts.append(
                select(job, literal(key), literal(None), func.sum(last.c.value), last.c.time).group_by(last.c.time)
            )
    return union_all(*parts)


def _last_points(job: BindParameter[str], key: str, limit: int) -> Subquery:
    """A job's last ``limit`` points of ``key``, by the (job_id, key, step) index."""
    return (
        select(JobMetric.key, JobMetric.worker, JobMetric.value, JobMetric.time, JobMetric.step)
        .where(JobMetric.job_id == job, JobMetric.key == key)
        .order_by(JobMetric.step.desc())
        .limit(limit)
        .subquery()
    )


def _sent_rate(points: list[tuple[int | None, float, datetime]]) -> float | None:
    """Bytes sent per second over the last RATE_WINDOW_S seconds, from each worker's running total (worker, total,
    time), summed over the workers. Points are stored in batches that share a time (the monitor flushes twice a
    second), so a worker's rate is its total's growth after its oldest batch in the window over the time since that
    batch; a total that falls (a new attempt's) counts again from its fall."""
    newest = max(t for _, _, t in points)
    by_worker: dict[int | None, list[tuple[datetime, float]]] = defaultdict(list)
    for worker, value, t in points:
        if (newest - t).total_seconds() <= RATE_WINDOW_S:
            by_worker[worker].append((t, value))
    rates = []
    for series in by_worker.values():
        series.sort()
        first = series[0][0]
        base = max(v for t, v in series if t == first)
        later = [v for t, v in series if t > first]
        span = (series[-1][0] - first).total_seconds()
        if later and span > 0:
            grown = sum(max(0.0, b - a) for a, b in pairwise([base, *later]))
            rates.append(grown / span)
    return sum(rates) if rates else None


def _wire_rate(points: list[tuple[datetime, float]]) -> float | None:
    """Bytes sent per second over the last RATE_WINDOW_S seconds of ``points`` (time, bytes). Points are stored in
    batches (the trainer flushes twice a second), so the rate is the bytes of the batches after the oldest one in the
    window over the time since that one."""
    if not points:
        return None
    newest = max(t for t, _ in points)
    window = [(t, v) for t, v in points if (newest - t).total_seconds() <= RATE_WINDOW_S]
    oldest = min(t for t, _ in window)
    span = (newest - oldest).total_seconds()
    return sum(v for t, v in window if t > oldest) / span if span > 0 else None
