"""Checkpoints written by training jobs (one per job and epoch)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.core.errors import NotFound
from app.db.base import utcnow
from app.db.models import Checkpoint, Job, JobMetric
from app.services import attempts


def record(
    *, session: Session, job_id: str, attempt: int, epoch: int, step: int, uri: str, metrics: dict[str, Any]
) -> Checkpoint:
    """One row per (job, epoch): a replayed attempt that writes the same epoch again updates it in place."""
    row = session.scalar(
        select(Checkpoint).where(Checkpoint.job_id == job_id, Checkpoint.epoch == epoch).with_for_update()
    )
    if row is None:
        row = Checkpoint(id=uuid.uuid4().hex, job_id=job_id, epoch=epoch, created_at=utcnow())
        session.add(row)
    row.attempt, row.step, row.uri, row.metrics = attempt, step, uri, metrics
    session.flush()
    return row


def list_for_job(*, session: Session, job_id: str) -> Sequence[Checkpoint]:
    return session.scalars(select(Checkpoint).where(Checkpoint.job_id == job_id).order_by(Checkpoint.epoch)).all()


def get(*, session: Session, checkpoint_id: str) -> Checkpoint:
    row = session.get(Checkpoint, checkpoint_id)
    if row is None:
        raise NotFound(f"No checkpoint with id {checkpoint_id!r}.")
    return row


def to_dict(c: Checkpoint) -> dict[str, Any]:
    return {
        "id": c.id,
        "job_id": c.job_id,
        "attempt": c.attempt,
        "epoch": c.epoch,
        "step": c.step,
        "uri": c.uri,
        "metrics": c.metrics,
        "created_at": c.created_at,
    }


def prune(*, session: Session, job_id: str, keep: int, keep_epoch: int | None = None) -> list[str]:
    """Drop all but the newest ``keep`` checkpoints of a job, and ``keep_epoch``'s (early stopping's best epoch,
    whose weights a resumed job registers at the end); returns the URIs whose files can go."""
    if keep <= 0:
        return []
    rows = session.scalars(
        select(Checkpoint).where(Checkpoint.job_id == job_id).order_by(Checkpoint.epoch.desc())
    ).all()
    gone = [row for row in rows[keep:] if row.epoch != keep_epoch]
    for row in gone:
        session.delete(row)
    return [row.uri for row in gone]


def forget_metrics_after(
    *, session: Session, job_id: str, checkpoint_id: str | None, attempt: int | None = None
) -> int:
    """Drop the job's metric points past the step of the checkpoint an attempt continues from (every point when it
    starts from scratch): the attempt writes them again, and each step, round or fit is stored once (a resumed
    xgboost job showed rounds 2001-2122 twice). Returns how many went.

    ``attempt``'s entry in the job's ``attempts`` (the current one's by default) records how many went and the
    highest id among them (``dropped_metric_ids_upto``): an event stream's ``Last-Event-ID`` up to that id is still
    one this job issued (app/services/events.py), and the attempt's new points get higher ids. The job row is locked
    first, as every writer of a job locks it; the runner checks that the attempt still owns the job first."""
    job = session.get(Job, job_id, with_for_update=True)
    if job is None:
        return 0
    row = session.get(Checkpoint, checkpoint_id) if checkpoint_id is not None else None
    where = [JobMetric.job_id == job_id, *([] if row is None else [JobMetric.step > row.step])]
    stmt = delete(JobMetric).where(*where).returning(JobMetric.id).execution_options(synchronize_session=False)
    gone = list(session.scalars(stmt))  # the ids deleted, whatever was written meanwhile
    if gone:
        job.attempts = attempts.update_attempt(job, attempt or job.attempt, dropped_metrics=len(gone),
                                               dropped_metric_ids_upto=max(gone))  # fmt: skip
    return len(gone)
