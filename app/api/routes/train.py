"""POST /train."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response, status

from app.api.deps import CallerDep, IdempotencyKey, RuntimeDep
from app.api.job_views import to_job_read
from app.schemas.jobs import JobRead
from app.schemas.train import TRAIN_EXAMPLES, TrainRequest
from app.services import spaces
from app.services.training import submit_training

router = APIRouter(tags=["train"])


@router.post(
    "/train",
    response_model=JobRead,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Queue a training job",
    description="Checks the request against the data (columns, types, the family's parameters), writes a QUEUED "
    "job and queues it. Poll `Location` (`GET /jobs/{id}`) for progress and the result.",
    responses={202: {"description": "Queued; `Location` names the job."}},
)
def train(
    request: Annotated[TrainRequest, Body(openapi_examples=TRAIN_EXAMPLES)],
    rt: RuntimeDep,
    caller: CallerDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobRead:
    job, _created = submit_training(
        db=rt.db,
        settings=spaces.for_caller(rt.settings, caller),
        spark=rt.spark,
        enqueue=rt.enqueue,
        request=request,
        owner=caller.owner,
        idempotency_key=idempotency_key,
        caller=caller,
    )
    response.headers["Location"] = f"/jobs/{job.id}"
    return to_job_read(job)
