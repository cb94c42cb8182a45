"""Job rows: creation, lookup, paging, guarded state transitions, progress, metrics and log lines."""

from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import Conflict, NotFound, ServiceUnavailable
from app.core.jobstates import EDGES, JobStatus
from app.db.base import utcnow
from app.db.models import Job, JobLog, JobMetric
from app.db.session import savepoint, transaction
from app.services import attempts, outputs, quotas
from app.services.cursors import decode, decode_cursor, encode, encode_cursor
from workers import plans
from workers.families import task_name


def new_id() -> str:
    return uuid.uuid4().hex


def request_fingerprint(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def posted_fingerprint(request: BaseModel) -> str:
    """The fingerprint an Idempotency-Key is checked against: the request as the client posted it (validated and
    dumped canonically: defaults filled in, nulls left out), never as the server rewrote it for the job (a version
    an alias or "newest" resolved to, a default output path), which changes between two posts of one body.

    Jobs written before this rule hashed the stored request instead. For /train (and recipes) the two are the same;
    a key first used for a request the server rewrote (batch /predict, /evaluate by alias or newest, /tune) before
    the change answers its replay with a 409 as another body would."""
    return request_fingerprint(request.model_dump(mode="json", exclude_none=True))


def replayed(*, db: sessionmaker[Session], owner: str, idempotency_key: str | None, fingerprint: str) -> Job | None:
    """The job an Idempotency-Key already names, looked up before the request is checked or planned: a replay
    returns the first job whatever has changed since (an alias moved, an output path now written). None for a new
    key (or none); the same key with another body is a 409."""
    if idempotency_key is None:
        return None
    with db() as session:
        existing = _job_by_key(session, owner, idempotency_key)
        return None if existing is None else _same_request_or_conflict(existing, fingerprint)


def create_job(
    *,
    session: Session,
    job_type: str,
    request: dict[str, Any],
    plan: dict[str, Any] | None = None,
    framework: str | None = None,
    name: str | None = None,
    owner: str = "anonymous",
    idempotency_key: str | None = None,
    max_attempts: int = 3,
    slots: int = 1,
    parent_id: str | None = None,
    trial: int | None = None,
    fingerprint: str | None = None,
) -> tuple[Job, bool]:
    """Insert a QUEUED job (:func:`submit` also queues it); returns ``(job, created)``. With an idempotency key,
    the same key and body give back the first job (``created`` False) and the same key with another body is a 409.
    ``fingerprint``: of the body as posted (:func:`posted_fingerprint`) where ``request`` is the server's rewrite."""
    fingerprint = fingerprint or request_fingerprint(request)
    if idempotency_key is not None:
        existing = _job_by_key(session, owner, idempotency_key)
        if existing is not None:
            return _same_request_or_conflict(existing, fingerprint), False
    job = Job(
        id=new_id(),
        type=job_type,
        framework=framework,
        name=name,
        status=JobStatus.QUEUED,
        progress=0.0,
        attempt=1,
        max_attempts=max_attempts,
        request=request,
        plan=plan,
        warnings=[],
        owner=owner,
        idempotency_key=idempotency_key,
        request_hash=fingerprint,
        created_at=utcnow(),
        slots=slots,
        parent_id=parent_id,
        trial=trial,
    )
    try:
        with savepoint(session):
            session.add(job)
    except IntegrityError:
        # Another request with the same key won the race between our SELECT and INSERT.
        existing = _job_by_key(session, owner, idempotency_key or "")
        if existing is None:
            raise
        return _same_request_or_conflict(existing, fingerprint), False
    return job, True


def _job_by_key(session: Session, owner: str, key: str) -> Job | None:
    return session.scalar(select(Job).where(Job.owner == owner, Job.idempotency_key == key))


def _same_request_or_conflict(job: Job, fingerprint: str) -> Job:
    if job.request_hash != fingerprint:
        raise Conflict(
            "This Idempotency-Key was already used with a different request body; use a new key for a new request.",
            job_id=job.id,
        )
    return job


def submit(
    *,
    db: sessionmaker[Session],
    enqueue: Callable[[str, str], None],
    job_type: str,
    request: dict[str, Any],
    plan: Any = None,
    framework: str | None = None,
    name: str | None = None,
    model: tuple[str | None, int | None] | None = None,
    owner: str = "anonymous",
    idempotency_key: str | None = None,
    max_attempts: int = 3,
    limits: quotas.Limits | None = None,
    slots: int | None = None,
    parent_id: str | None = None,
    trial: int | None = None,
    fingerprint: str | None = None,
    output: str | None = None,
    warnings: Sequence[str] = (),
) -> tuple[Job, bool]:
    """Every kind of job starts here: write the QUEUED job with the request and the plan it was checked into
    (``plan``, a workers plan dataclass; the runner executes exactly it), commit, then send its message by explicit
    task name. ``model`` is the (name, version) an evaluation or prediction uses. Returns ``(job, created)``: with an
    idempotency key already used for the same body, the first job and False (nothing is sent again).

    When the broker refuses the message, the job becomes FAILED (ENQUEUE_FAILED) and the caller gets a 503: nothing
    stays queued that no consumer will ever see. ``limits``: the owner's quotas (never fitting its slots: 422; over
    its queued jobs: 429). ``slots`` overrides the plan's (a tune holds none); ``parent_id``, ``trial``: a tune's
    trial. ``fingerprint``: of the body as posted (:func:`posted_fingerprint`). ``output``: where a batch prediction
    writes (private to ``owner``). ``warnings``: the request's, after the plan's; both are in the 202."""
    slots = quotas.job_slots(plan) if slots is None else slots
    with quotas.owner_lock(db, owner, needed=bool(limits and limits.queued_jobs)) as session:
        repeated = idempotency_key is not None and _job_by_key(session, owner, idempotency_key) is not None
        if limits is not None and not repeated:
            quotas.check_submit(session=session, owner=owner, limits=limits, slots=slots, request=request)
        job, created = create_job(
            session=session,
            job_type=job_type,
            request=request,
            plan=plans.dump(plan) if plan is not None else None,
            framework=framework,
            name=name,
            owner=owner,
            idempotency_key=idempotency_key,
            max_attempts=max_attempts,
            slots=slots,
            parent_id=parent_id,
            trial=trial,
            fingerprint=fingerprint,
        )
        if created and model is not None:
            job.model_name, job.model_version = model
        if created and output is not None:
            job.output_path, job.output_key = output, outputs.key(output)
        if created:  # unsent until the send returns: a driver killed in between leaves it to a reconciler's pass
            job.attempts = [{"attempt": 1, "queued_at": job.created_at.isoformat(), "sent": False}]
            job.warnings = [*(getattr(plan, "warnings", None) or ()), *warnings]  # in the 202, not first at the start
    if not created:
        return job, False
    try:
        enqueue(task_name(job_type, framework or ""), job.id)
    except Exception as exc:
        with transaction(db) as session:
            transition(
                session=session,
                job_id=job.id,
                sources=[JobStatus.QUEUED],
                target=JobStatus.FAILED,
                finished_at=utcnow(),
                error_reason="ENQUEUE_FAILED",
                error_message=f"the job broker did not accept the job: {exc}",
            )
        raise ServiceUnavailable(
            f"The job broker is unreachable ({type(exc).__name__}); nothing was queued, try again later."
        ) from exc
    with contextlib.suppress(Exception), transaction(db) as session:  # else a pass sends a copy, which is harmless
        attempts.mark_sent(session=session, job_id=job.id, attempt=1)
    return job, True


def get_job(*, session: Session, job_id: str) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"No job with id {job_id!r}.")
    return job


def list_jobs(
    *,
    session: Session,
    status: str | None = None,
    job_type: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
    owner: str | None = None,
    parent_id: str | None = None,
    name: str | None = None,
) -> tuple[Sequence[Job], str | None]:
    """Newest first: a page and the next one's cursor (None at the end). ``name``: in the name or model name."""
    stmt = select(Job)
    for column, value in ((Job.parent_id, parent_id), (Job.status, status), (Job.type, job_type), (Job.owner, owner)):
        if value is not None:
            stmt = stmt.where(column == value)
    if name:
        stmt = stmt.where(or_(*(c.icontains(name, autoescape=True) for c in (Job.name, Job.model_name))))
    if cursor:
        created, job_id = decode_cursor(cursor)
        stmt = stmt.where(or_(Job.created_at < created, and_(Job.created_at == created, Job.id < job_id)))
    rows = session.scalars(stmt.order_by(Job.created_at.desc(), Job.id.desc()).limit(limit + 1)).all()
    page = rows[:limit]
    next_cursor = encode_cursor(page[-1].created_at, page[-1].id) if len(rows) > limit else None
    return page, next_cursor


def transition(
    *,
    session: Session,
    job_id: str,
    sources: Collection[JobStatus],
    target: JobStatus,
    only_if: Mapping[str, Any] | None = None,
    **values: Any,
) -> bool:
    """Move the job to ``target`` iff its status is one of ``sources`` (and its columns equal ``only_if``, e.g.
    the runner's ``worker_id`` and ``attempt``): one conditional UPDATE, so of two racing callers (or two
    deliveries of one message) exactly one wins. Returns whether this call won."""
    for source in sources:
        if target not in EDGES[source]:
            raise ValueError(f"{source} -> {target} is not an edge of the job state machine")
    conditions = [getattr(Job, column) == value for column, value in (only_if or {}).items()]
    stmt = (
        update(Job)
        .where(Job.id == job_id, Job.status.in_([s.value for s in sources]), *conditions)
        .values(status=target.value, **values)
        .execution_options(synchronize_session=False)
    )
    return session.execute(stmt).rowcount == 1  # type: ignore[attr-defined]


def set_progress(
    *,
    session: Session,
    job_id: str,
    fraction: float,
    message: str | None,
    worker_id: str | None = None,
    attempt: int | None = None,
) -> None:
    """Progress of a running job; with ``worker_id`` (and ``attempt``), only while that driver (that attempt of it)
    still owns the job: a slow driver whose attempt 1 was given up, and which took attempt 2 itself, must not write
    attempt 1's progress and heartbeat onto attempt 2's row."""
    fraction = min(1.0, max(0.0, float(fraction)))
    values: dict[str, Any] = {"progress": fraction, "heartbeat_at": utcnow()}
    if message is not None:
        values["progress_message"] = message
    stmt = update(Job).where(Job.id == job_id)
    if worker_id is not None:
        stmt = stmt.where(Job.worker_id == worker_id)
    if attempt is not None:
        stmt = stmt.where(Job.attempt == attempt)
    session.execute(stmt.values(**values))


def set_model(*, session: Session, job_id: str, name: str, version: int) -> None:
    """The model version a job registered."""
    session.execute(update(Job).where(Job.id == job_id).values(model_name=name, model_version=version))


def heartbeat(*, session: Session, job_id: str, worker_id: str, attempt: int | None = None) -> JobStatus | None:
    """Record that ``worker_id`` still runs the job (its attempt ``attempt``); returns the job's current status,
    or None when the job is gone or no longer this runner's: the reconciler gave it up and another driver may
    run it now. A runner that gets None must stop without recording anything."""
    owned = [Job.id == job_id, Job.worker_id == worker_id]
    if attempt is not None:
        owned.append(Job.attempt == attempt)
    session.execute(update(Job).where(*owned).values(heartbeat_at=utcnow()))
    status = session.scalar(select(Job.status).where(*owned))
    return JobStatus(status) if status is not None else None


def add_warning(*, session: Session, job_id: str, message: str) -> None:
    job = session.get(Job, job_id, with_for_update=True)
    if job is not None and message not in job.warnings:  # the plan's, said at the 202, are said again at the start
        job.warnings = [*job.warnings, message]


def add_metrics(*, session: Session, job_id: str, points: Iterable[dict[str, Any]]) -> int:
    """Step metrics in one multi-row INSERT (no ORM objects: a training job writes hundreds of points a second,
    in the driver process that also answers the API)."""
    now = utcnow()
    rows = [
        {
            "job_id": job_id,
            "key": p["key"],
            "step": int(p["step"]),
            "epoch": p.get("epoch"),
            "value": float(p["value"]),
            "worker": p.get("worker"),
            "time": p.get("time") or now,
        }
        for p in points
    ]
    if rows:
        session.execute(insert(JobMetric), rows)
    return len(rows)


def _step_and_id(parts: list[str]) -> tuple[int, int]:
    tag, step, point_id = parts
    # the tag refuses another list's cursor; int() would take "+1", " 1" and "1_0": only plain digits are ours
    if tag != "m1" or not step.removeprefix("-").isdigit() or not point_id.isdigit():
        raise ValueError("not a metrics cursor")
    if not (-(2**31) <= int(step) < 2**31 and int(point_id) < 2**63):
        raise ValueError("out of range")  # of the columns (32-bit step, 64-bit id): PostgreSQL refuses the query
    return int(step), int(point_id)


def page_metrics(
    *,
    session: Session,
    job_id: str,
    key: str | None = None,
    since_step: int | None = None,
    limit: int = 10000,
    cursor: str | None = None,
) -> tuple[Sequence[JobMetric], str | None]:
    """Points in (step, id) order, and the cursor that continues exactly after the last one (None at the end): a
    page may end inside a step, which ``since_step`` (strictly after a step) could not continue."""
    stmt = select(JobMetric).where(JobMetric.job_id == job_id)
    if key is not None:
        stmt = stmt.where(JobMetric.key == key)
    if since_step is not None:
        stmt = stmt.where(JobMetric.step > since_step)
    if cursor:
        step, point_id = decode(cursor, _step_and_id)
        stmt = stmt.where(or_(JobMetric.step > step, and_(JobMetric.step == step, JobMetric.id > point_id)))
    rows = session.scalars(stmt.order_by(JobMetric.step, JobMetric.id).limit(limit + 1)).all()
    page = rows[:limit]
    return page, encode("m1", page[-1].step, page[-1].id) if len(rows) > limit else None


def add_log(*, session: Session, job_id: str, message: str, level: str = "INFO") -> None:
    session.add(JobLog(job_id=job_id, message=message, level=level, time=utcnow()))


def list_logs(*, session: Session, job_id: str, after_id: int | None = None, limit: int = 200) -> Sequence[JobLog]:
    """The newest ``limit`` lines (oldest first), or the lines after ``after_id`` when following a log."""
    stmt = select(JobLog).where(JobLog.job_id == job_id)
    if after_id is not None:
        rows = session.scalars(stmt.where(JobLog.id > after_id).order_by(JobLog.id).limit(limit)).all()
        return rows
    rows = session.scalars(stmt.order_by(JobLog.id.desc()).limit(limit)).all()
    return list(reversed(rows))


def request_cancel(*, session: Session, job_id: str) -> tuple[Job, bool]:
    """Ask a job to stop: QUEUED jobs end CANCELLED at once, STARTING/RUNNING ones go to CANCELLING and their
    runner stops them. Returns ``(job, stopping_now)``; a repeat is harmless, a finished job is a 409."""
    for _ in range(5):
        job = get_job(session=session, job_id=job_id)
        status = JobStatus(job.status)
        now = utcnow()
        if status == JobStatus.QUEUED:
            won = transition(
                session=session,
                job_id=job_id,
                sources=[JobStatus.QUEUED],
                target=JobStatus.CANCELLED,
                cancel_requested_at=now,
                finished_at=now,
                error_reason="CANCELLED",
                error_message="cancelled before it started",
                progress_message="cancelled before it started",  # not what a queued attempt last said
                waiting_for=None,
            )
        elif status in (JobStatus.STARTING, JobStatus.RUNNING):
            won = transition(
                session=session,
                job_id=job_id,
                sources=[status],
                target=JobStatus.CANCELLING,
                cancel_requested_at=now,
            )
        elif status in (JobStatus.CANCELLING, JobStatus.CANCELLED):
            return job, False
        else:
            raise Conflict(
                f"Job {job_id} already finished ({status}); there is nothing to cancel.",
                job_status=str(status),
            )
        if won:
            session.flush()
            session.refresh(job)
            return job, job.status == JobStatus.CANCELLING
        session.expire(job)  # lost a race with the runner: look again
    raise Conflict(f"Job {job_id} keeps changing state; try the cancel again.")
