"""POST /tune."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response, status

from app.api.deps import CallerDep, IdempotencyKey, RuntimeDep
from app.api.job_views import to_job_read
from app.schemas.jobs import JobRead
from app.schemas.tune import TUNE_EXAMPLE, TuneRequest
from app.services import spaces
from app.services.tuning.submit import submit_tune

router = APIRouter(tags=["tune"])


@router.post(
    "/tune",
    response_model=JobRead,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Queue a hyperparameter search (a tune job whose trials are training jobs)",
    description="Checks the base /train body and the ends of every range against the data, writes a QUEUED tune "
    "job and queues it. Its result holds the leaderboard and the best trial; the best trial's model version gets "
    "the alias `best` (docs/tuning.md).",
    responses={202: {"description": "Queued; `Location` names the job."}},
)
def tune(
    request: Annotated[TuneRequest, Body(openapi_examples=TUNE_EXAMPLE)],
    rt: RuntimeDep,
    caller: CallerDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobRead:
    job, _created = submit_tune(
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
