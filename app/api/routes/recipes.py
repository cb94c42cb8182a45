"""POST /recipes/...: small self-contained Spark jobs that check what the cluster can do."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Response, status

from app.api.deps import CallerDep, IdempotencyKey, RuntimeDep
from app.api.job_views import to_job_read
from app.schemas.jobs import JobRead
from app.schemas.recipes import GPU_SMOKE_EXAMPLES, GpuSmokeRequest
from app.services.recipes import submit_gpu_smoke

router = APIRouter(tags=["recipes"])


@router.post(
    "/recipes/gpu-smoke",
    response_model=JobRead,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Queue the GPU smoke test: join two DataFrames, count, and say whether GPUs ran it",
    description="Builds two `rows`-row DataFrames with known keys, joins them, counts the result and checks the "
    "count (the job fails on a wrong count). The job's `result` holds `counts` (left, right, joined, expected), "
    "`seconds`, `ran_on` (`gpu` or `cpu`), `why` (a sentence), `rapids` (as in `GET /cluster`), `gpu_addresses`, "
    "`gpu_operators` (the Gpu* operators of the executed plan) and `operators`. On a CPU cluster it runs on the CPU "
    "and says why; `device: cuda` there is a 422.",
    responses={202: {"description": "Queued; `Location` names the job."}},
)
def gpu_smoke(
    request: Annotated[GpuSmokeRequest, Body(openapi_examples=GPU_SMOKE_EXAMPLES)],
    rt: RuntimeDep,
    caller: CallerDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> JobRead:
    job, _created = submit_gpu_smoke(
        db=rt.db,
        spark=rt.spark,
        enqueue=rt.enqueue,
        request=request,
        owner=caller.owner,
        idempotency_key=idempotency_key,
        settings=rt.settings,
    )
    response.headers["Location"] = f"/jobs/{job.id}"
    return to_job_read(job)
