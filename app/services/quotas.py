"""Quotas per owner: jobs running at once, task slots their jobs hold, jobs queued, and requests per second per key.

The limits are settings (docs/configuration.md#quotas): ``SPARKTRAIN_QUOTA_*`` is the default of every owner (0: no
limit) and ``SPARKTRAIN_OWNER_QUOTAS`` overrides it per owner.

- ``queued_jobs`` is checked when a job is submitted: one more is a 429 naming the quota, with ``Retry-After``.
- ``concurrent_jobs`` and ``task_slots`` are checked when a driver takes a job from the queue. A job that would go
  over waits in QUEUED (``waiting_for`` names the quota) instead of failing; its message is dropped, and when a job
  of the same owner ends (:func:`wake`, called by the runner, and by every reconciler pass) the oldest waiting jobs
  that fit are sent again. The check and the take happen under one lock per owner (a PostgreSQL advisory lock, held
  to the end of the transaction; on SQLite, whose embedded default has one driver, a lock in the process), so two
  drivers never both start a job into the last free slot. A job that needs more slots than its owner may ever hold
  is refused when it is submitted (422), since it could never start.
- ``requests_per_s`` is a token bucket per API key (``RequestLimiter``), shared by every driver through Redis when
  the broker is Redis and through the database otherwise.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.core.auth import Caller, valid_owner
from app.core.errors import NotFound, TooManyRequests, ValidationFailed
from app.core.jobstates import ACTIVE, JobStatus, JobType
from app.core.settings import QUOTAS, Settings
from app.db.base import utcnow
from app.db.models import Dataset, Job, Model, RateBucket
from app.db.session import transaction
from app.services import spaces
from workers.families import task_name

QUEUE_RETRY_AFTER_S = 30
"""``Retry-After`` of a submit over the queued-jobs quota: about how long a small job takes to leave the queue."""
_SQLITE_TAKE = threading.Lock()


@dataclass(frozen=True)
class Limits:
    """One owner's quotas; 0 is no limit."""

    concurrent_jobs: int = 0
    task_slots: int = 0
    queued_jobs: int = 0
    requests_per_s: int = 0

    @property
    def any_job_limit(self) -> bool:
        return bool(self.concurrent_jobs or self.task_slots)


def limits_for(*, settings: Settings, owner: str) -> Limits:
    """The default quotas with the owner's own over them."""
    values = {name: getattr(settings, f"quota_{name}") for name in QUOTAS}
    values.update(settings.owner_quotas.get(owner, {}))
    return Limits(**values)


def job_slots(plan: Any) -> int:
    """Task slots a job holds while it runs: its plan's workers (a barrier stage holds them all), else one."""
    workers = getattr(plan, "num_workers", None)
    return int(workers) if isinstance(workers, int) and workers > 0 else 1


def check_submit(
    *, session: Session, owner: str, limits: Limits, slots: int, request: Mapping[str, Any] | None = None
) -> None:
    """Before a job is written: 422 when it could never start under the slot quota (at the request's field of
    workers), 429 when the owner already has ``queued_jobs`` jobs waiting."""
    if limits.task_slots and slots > limits.task_slots:
        framework = (request or {}).get("framework")
        raise ValidationFailed.at(
            {"torch": "training.num_workers", "xgboost": "params.num_workers"}.get(str(framework), "num_workers"),
            f"the job needs {slots} task slots and the owner {owner!r} may hold at most {limits.task_slots} (quota "
            "task_slots): ask for fewer workers",
            quota="task_slots",
        )
    if limits.queued_jobs:
        queued = _count(session, owner, [JobStatus.QUEUED])
        if queued >= limits.queued_jobs:
            raise TooManyRequests(
                f"{owner!r} has {queued} jobs queued, the most its quota allows (queued_jobs = {limits.queued_jobs}); "
                "submit again once some have started.",
                headers={"Retry-After": str(QUEUE_RETRY_AFTER_S)},
                quota="queued_jobs",
                limit=limits.queued_jobs,
                used=queued,
            )


def _count(session: Session, owner: str, statuses: Any) -> int:
    """The owner's jobs in ``statuses``. A running tune job is not counted among the active ones: it runs no work
    of its own and its trials count (with ``concurrent_jobs: 1`` a search kept its own first trial waiting for
    ever); a queued one counts as any queued job."""
    stmt = select(func.count()).where(Job.owner == owner, Job.status.in_([s.value for s in statuses]))
    if statuses is ACTIVE:
        stmt = stmt.where(Job.type != JobType.TUNE.value)
    return int(session.scalar(stmt) or 0)


def _slots_in_use(session: Session, owner: str) -> int:
    stmt = select(func.coalesce(func.sum(Job.slots), 0)).where(
        Job.owner == owner, Job.status.in_([s.value for s in ACTIVE])
    )
    return int(session.scalar(stmt) or 0)


def blocking_quota(*, session: Session, owner: str, slots: int, limits: Limits) -> str | None:
    """The quota that keeps one more job of ``owner`` (holding ``slots``) from starting now, or None."""
    if limits.concurrent_jobs and _count(session, owner, ACTIVE) >= limits.concurrent_jobs:
        return "concurrent_jobs"
    if limits.task_slots and _slots_in_use(session, owner) + slots > limits.task_slots:
        return "task_slots"
    return None


@contextmanager
def owner_lock(db: sessionmaker[Session], owner: str, *, needed: bool) -> Iterator[Session]:
    """A transaction in which the owner's running jobs cannot change under a quota check (see the module)."""
    bind = db.kw.get("bind")
    dialect = bind.dialect.name if bind is not None else ""
    if needed and dialect == "sqlite":
        with _SQLITE_TAKE, transaction(db) as session:  # released after the commit
            yield session
        return
    with transaction(db) as session:
        if needed and dialect == "postgresql":
            key = int.from_bytes(hashlib.sha256(f"quota:{owner}".encode()).digest()[:8], "big", signed=True)
            session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
        yield session


def unknown_owners(settings: Settings) -> list[str]:
    """A line for each owner of ``SPARKTRAIN_OWNER_QUOTAS`` that no API key has (a misspelling: ``alcie``)."""
    owners = sorted({k.owner for k in settings.api_keys})
    unknown = sorted(set(settings.owner_quotas) - set(owners)) if owners else []
    return [f"SPARKTRAIN_OWNER_QUOTAS names {o!r}, which no API key has (the owners: {', '.join(owners)})"
            for o in unknown]  # fmt: skip


def owner_usage(*, session: Session, settings: Settings, caller: Caller, owner: str) -> dict[str, Any]:
    """``owner``'s quotas and usage, for that owner or an admin; anyone else is answered as for an unknown owner."""
    if not caller.sees(owner) or not valid_owner(owner) or not _known(session, settings, owner, caller):
        raise NotFound(f"No owner {owner!r} whose usage you may see.")  # '..' is no owner's name
    found = usage(session=session, owner=owner, limits=limits_for(settings=settings, owner=owner))
    space = spaces.space(settings, owner)
    if space is not None and (owner == caller.owner or any(k.owner == owner for k in settings.api_keys)):
        space.mkdir(parents=True, exist_ok=True)  # made now, as on its first dataset request: an operator fills it
    return {**found, "data_space": str(space) if space is not None else None}


def _known(session: Session, settings: Settings, owner: str, caller: Caller) -> bool:
    """An owner a key names, a quota is set for, or that owns something (a key since removed): an admin's typo
    (``ALICE``) is a 404, not an owner without limits."""
    if owner == caller.owner or owner in settings.owner_quotas or any(k.owner == owner for k in settings.api_keys):
        return True
    return any(session.scalar(select(table.id).where(table.owner == owner).limit(1)) is not None
               for table in (Job, Model, Dataset))  # fmt: skip


def usage(*, session: Session, owner: str, limits: Limits) -> dict[str, Any]:
    """What ``GET /owners/me/usage`` shows: each quota's limit (None: no limit) and what the owner uses of it."""
    waiting = session.execute(
        select(Job.waiting_for, func.count())
        .where(Job.owner == owner, Job.status == JobStatus.QUEUED.value, Job.waiting_for.is_not(None))
        .group_by(Job.waiting_for)
    ).all()
    return {
        "owner": owner,
        "quotas": {
            "concurrent_jobs": {"limit": limits.concurrent_jobs or None, "used": _count(session, owner, ACTIVE)},
            "task_slots": {"limit": limits.task_slots or None, "used": _slots_in_use(session, owner)},
            "queued_jobs": {"limit": limits.queued_jobs or None, "used": _count(session, owner, [JobStatus.QUEUED])},
            "requests_per_s": {"limit": limits.requests_per_s or None},
        },
        "waiting": {str(quota): int(n) for quota, n in waiting},
    }


def wake(
    *,
    db: sessionmaker[Session],
    settings: Settings,
    send: Callable[[str, str, str], None],
    owner: str | None = None,
    queue_of: Callable[[Job], str | None] = lambda job: None,
) -> list[str]:
    """Send again the messages of waiting jobs that now fit their owner's quotas (of ``owner``, or of every owner),
    oldest first; returns their ids. A job woken less than ``heartbeat_stale_s`` ago is not woken again (its
    message is on its way)."""
    recent = utcnow() - timedelta(seconds=settings.heartbeat_stale_s)
    with db() as session:
        stmt = select(Job).where(Job.status == JobStatus.QUEUED.value, Job.waiting_for.is_not(None))
        if owner is not None:
            stmt = stmt.where(Job.owner == owner)
        waiting = list(session.scalars(stmt.order_by(Job.created_at, Job.id)))
        woken: list[tuple[str, str, str | None]] = []
        planned: dict[str, tuple[int, int]] = {}
        for job in waiting:
            limits = limits_for(settings=settings, owner=job.owner)
            running, slots = planned.get(job.owner) or (_count(session, job.owner, ACTIVE),
                                                         _slots_in_use(session, job.owner))  # fmt: skip
            fits = (not limits.concurrent_jobs or running < limits.concurrent_jobs) and (
                not limits.task_slots or slots + job.slots <= limits.task_slots
            )
            if not fits:
                planned[job.owner] = (running, slots)
                continue
            planned[job.owner] = (running + 1, slots + job.slots)
            if job.woken_at is None or job.woken_at < recent:
                woken.append((job.id, task_name(job.type, job.framework or ""), queue_of(job)))
    sent: list[str] = []
    for job_id, task, queue in woken:
        send(task, job_id, queue or settings.queue)
        with transaction(db) as session:
            session.execute(update(Job).where(Job.id == job_id, Job.status == JobStatus.QUEUED.value)
                            .values(woken_at=utcnow()))  # fmt: skip
        sent.append(job_id)
    return sent


class RequestLimiter:
    """Token buckets of requests per API key: ``rate`` tokens a second, at most ``rate`` saved up (one second's
    worth). :meth:`take` spends one and returns 0, or returns the seconds until one is there."""

    def __init__(self, *, db: sessionmaker[Session], redis_url: str | None) -> None:
        self._db = db
        self._redis: Any = None
        if redis_url:
            import redis

            self._redis = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
            self._script = self._redis.register_script(_REDIS_BUCKET)

    @staticmethod
    def bucket(authorization: str | None) -> str:
        """A bucket id for a key that never reveals it: the key itself, not the header's spelling, names the bucket
        (``Bearer k``, ``bearer  k`` and ``Bearer k `` all spend from the same one)."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        key = token.strip() if scheme.lower() == "bearer" and token.strip() else "anonymous"
        return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]

    def take(self, bucket: str, rate: int) -> float:
        if self._redis is not None:
            return float(self._script(keys=[f"sparktrain:rate:{bucket}"], args=[rate, rate]))
        return self._take_db(bucket, float(rate))

    def _take_db(self, bucket: str, rate: float) -> float:
        """One conditional UPDATE spends a token (atomic on both databases); no row yet: insert a full bucket."""
        for _ in range(3):
            now = time.time()
            level = RateBucket.tokens + (now - RateBucket.updated) * rate
            refilled = _least(level, rate)
            with transaction(self._db) as session:
                spent = session.execute(
                    update(RateBucket)
                    .where(RateBucket.key == bucket, refilled >= 1.0)
                    .values(tokens=refilled - 1.0, updated=now)
                    .execution_options(synchronize_session=False)
                )
                if spent.rowcount == 1:  # type: ignore[attr-defined]
                    return 0.0
                row = session.get(RateBucket, bucket)
                if row is not None:
                    have = min(rate, row.tokens + (now - row.updated) * rate)
                    return max(1.0 - have, 0.0) / rate
            try:
                with transaction(self._db) as session:
                    session.add(RateBucket(key=bucket, tokens=rate - 1.0, updated=now))
                return 0.0
            except IntegrityError:
                continue  # another request created it first: spend from it
        return 0.0


def _least(value: Any, cap: float) -> Any:
    from sqlalchemy import case

    return case((value > cap, cap), else_=value)


_REDIS_BUCKET = """
local rate = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local saved = redis.call('HMGET', KEYS[1], 'tokens', 'updated')
local tokens = tonumber(saved[1]) or cap
local updated = tonumber(saved[2]) or now
tokens = math.min(cap, tokens + math.max(0, now - updated) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'updated', tostring(now))
redis.call('EXPIRE', KEYS[1], 60 + math.ceil(cap / rate))
return tostring(wait)
"""
