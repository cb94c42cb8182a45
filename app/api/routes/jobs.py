"""Jobs: list, read, metrics, logs, cancel, checkpoints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Query, Request, Response, status
from starlette.concurrency import run_in_threadpool

from app.api.deps import CallerDep, RuntimeDep, SessionDep
from app.api.job_views import to_job_read
from app.api.routes.events import STREAM_CONTENT, LastEventId, follow_logs
from app.core.jobstates import JobStatus, JobType
from app.schemas.checkpoints import CheckpointList
from app.schemas.jobs import JobPage, JobRead, LogLine, LogsRead, MetricPoint, MetricsRead
from app.services import checkpoints, jobs
from app.services.access import job_of, job_of_on_loop

if TYPE_CHECKING:
    from app.core.auth import Caller
    from app.runtime import ServiceRuntime

router = APIRouter(tags=["jobs"])
INT32 = 2**31 - 1  # job_metrics.step and job_logs.id are 32-bit integer columns


@router.get("/jobs", response_model=JobPage, summary="List jobs, newest first")
def list_jobs(
    session: SessionDep,
    caller: CallerDep,
    status_: Annotated[JobStatus | None, Query(alias="status")] = None,
    type_: Annotated[JobType | None, Query(alias="type")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    parent_id: Annotated[
        str | None, Query(max_length=64, description="Only the children of this job: a tune job's trials.")
    ] = None,
    name: Annotated[
        str | None,
        Query(max_length=200, description="Only jobs whose name or model name contains this text, in any case."),
    ] = None,
) -> JobPage:
    page, next_cursor = jobs.list_jobs(
        session=session, status=status_, job_type=type_, limit=limit, cursor=cursor, owner=caller.scope,
        parent_id=parent_id, name=name,
    )  # fmt: skip
    return JobPage(items=[to_job_read(j) for j in page], next_cursor=next_cursor)


@router.get("/jobs/{job_id}", response_model=JobRead, summary="One job")
async def get_job(job_id: str, rt: RuntimeDep, caller: CallerDep) -> JobRead:
    # The request clients poll: on PostgreSQL read on the event loop, without the hop to the thread pool and back
    # (app/db/loop_reads.py); elsewhere the read blocks, so it goes to the pool.
    if rt.loop_reads is not None:
        return to_job_read(await job_of_on_loop(reads=rt.loop_reads, job_id=job_id, caller=caller))
    return await run_in_threadpool(_read_job, rt, job_id, caller)


def _read_job(rt: ServiceRuntime, job_id: str, caller: Caller) -> JobRead:
    with rt.read_sessions() as session:
        return to_job_read(job_of(session=session, job_id=job_id, caller=caller))


@router.get(
    "/jobs/{job_id}/metrics",
    response_model=MetricsRead,
    summary="Step metrics, readable while it runs",
    description="Points in step order (ties in the order they were written). At most `limit` points per answer: "
    "`next_cursor` is null when the answer holds the last point there is now, else pass it as `cursor` (with the "
    "same `key` and `since_step`) for the points after them. Paging by cursor returns every point exactly once, "
    "in order, whatever the limit; `since_step` alone cannot continue a page that ended inside a step. A cursor "
    "this service did not issue is a 400.",
)
def get_metrics(
    job_id: str,
    session: SessionDep,
    caller: CallerDep,
    key: Annotated[str | None, Query(max_length=100)] = None,
    since_step: Annotated[int | None, Query(ge=-INT32, le=INT32, description="Only steps after this one.")] = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000,
    cursor: Annotated[
        str | None, Query(max_length=200, description="A `next_cursor`: the points after the page it ended.")
    ] = None,
) -> MetricsRead:
    job_of(session=session, job_id=job_id, caller=caller)
    rows, next_cursor = jobs.page_metrics(
        session=session, job_id=job_id, key=key, since_step=since_step, limit=limit, cursor=cursor
    )
    return MetricsRead(
        metrics=[
            MetricPoint(key=m.key, step=m.step, epoch=m.epoch, value=m.value, worker=m.worker, time=m.time)
            for m in rows
        ],
        next_cursor=next_cursor,
    )


@router.get(
    "/jobs/{job_id}/logs",
    response_model=LogsRead,
    summary="Recent log lines of a job; with follow=true, its lines pushed as they come (Server-Sent Events)",
    responses={200: {"content": STREAM_CONTENT}},
)
def get_logs(
    job_id: str,
    request: Request,
    session: SessionDep,
    rt: RuntimeDep,
    caller: CallerDep,
    after: Annotated[int | None, Query(ge=0, le=INT32, description="Only lines after this id (to follow it).")] = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 200,
    follow: Annotated[
        bool, Query(description="Stream `log` events (after `after`), then `end` when the job ends.")
    ] = False,
    last_event_id: LastEventId = None,
) -> LogsRead | Response:
    if follow:
        session.close()  # the stream reads through sessions of its own: hold no connection while it lasts
        return follow_logs(request, rt, caller, job_id, after=after, last_event_id=last_event_id)
    job_of(session=session, job_id=job_id, caller=caller)
    rows = jobs.list_logs(session=session, job_id=job_id, after_id=after, limit=limit)
    lines = [LogLine(id=r.id, time=r.time, level=r.level, message=r.message) for r in rows]
    return LogsRead(lines=lines, next_after=lines[-1].id if lines else after)


@router.post(
    "/jobs/{job_id}/cancel",
    response_model=JobRead,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Cancel a job (repeat is harmless; 409 once it finished)",
)
def cancel_job(job_id: str, session: SessionDep, rt: RuntimeDep, caller: CallerDep) -> JobRead:
    job_of(session=session, job_id=job_id, caller=caller)
    job, stopping = jobs.request_cancel(session=session, job_id=job_id)
    session.commit()
    if stopping:
        rt.jobs.cancel_local(job_id)  # at once if it runs here; otherwise its own driver's watcher sees the row
    return to_job_read(job)


@router.get(
    "/jobs/{job_id}/checkpoints",
    summary="Checkpoints written by a training job",
    response_model=CheckpointList,
)
def list_checkpoints(job_id: str, session: SessionDep, caller: CallerDep) -> dict[str, list[dict[str, object]]]:
    job_of(session=session, job_id=job_id, caller=caller)
    return {"checkpoints": [checkpoints.to_dict(c) for c in checkpoints.list_for_job(session=session, job_id=job_id)]}
