"""Checkpoints written by training jobs."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from app.api.deps import CallerDep, SessionDep
from app.api.openapi import file_response
from app.schemas.checkpoints import CheckpointRead
from app.services import artifacts, checkpoints
from app.services.access import checkpoint_of

router = APIRouter(tags=["checkpoints"])


@router.get(
    "/checkpoints/{checkpoint_id}",
    summary="One checkpoint: job, epoch, step, URI, validation metrics",
    response_model=CheckpointRead,  # checkpoints.to_dict's members, serialized as before (datetimes as ...Z)
)
def get_checkpoint(checkpoint_id: str, session: SessionDep, caller: CallerDep) -> dict[str, Any]:
    return checkpoints.to_dict(checkpoint_of(session=session, checkpoint_id=checkpoint_id, caller=caller))


@router.get(
    "/checkpoints/{checkpoint_id}/artifact",
    summary="Download a checkpoint (weights, every worker's optimizer and residual state) as .tar.gz",
    response_class=StreamingResponse,
    responses=file_response("application/gzip"),
)
def download(checkpoint_id: str, session: SessionDep, caller: CallerDep) -> StreamingResponse:
    row = checkpoint_of(session=session, checkpoint_id=checkpoint_id, caller=caller)
    filename = f"checkpoint-{row.job_id[:8]}-epoch-{row.epoch}.tar.gz"
    return StreamingResponse(
        artifacts.checkpoint_archive(row),
        media_type="application/gzip",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
