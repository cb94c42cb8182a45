"""Checkpoints written by training jobs."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.deps import SessionDep
from app.services import checkpoints

router = APIRouter(tags=["checkpoints"])


@router.get("/checkpoints/{checkpoint_id}", summary="One checkpoint: job, epoch, step, URI, validation metrics")
def get_checkpoint(checkpoint_id: str, session: SessionDep) -> dict[str, Any]:
    return checkpoints.to_dict(checkpoints.get(session=session, checkpoint_id=checkpoint_id))
