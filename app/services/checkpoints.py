"""Checkpoints written by training jobs (one per job and epoch)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.errors import NotFound
from app.db.models import Checkpoint


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
