"""A job's events pushed as they happen: ``GET /jobs/{id}/events`` (Server-Sent Events). ``GET /jobs/{id}/logs
?follow=true`` (app/api/routes/jobs.py) streams the log lines the same way."""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated

from fastapi import APIRouter, Header, Request, Response
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from app.api.deps import CallerDep, RuntimeDep
from app.api.event_hub import ALL_KINDS, EventHub
from app.core.auth import Caller
from app.runtime import ServiceRuntime
from app.services import events
from app.services.events import Cursor

router = APIRouter(tags=["jobs"])


class EventStream(Response):
    """How the OpenAPI document names the media type of an event stream."""

    media_type = "text/event-stream"


PING_S = 15
EVENT_SCHEMA = {
    "description": "One Server-Sent Event: its kind, its JSON payload and its id (for Last-Event-ID).",
    "type": "object",
    "required": ["data"],
    "properties": {
        "event": {"type": "string", "enum": ["state", "metrics", "log", "end"]},
        "data": {"type": "string", "contentMediaType": "application/json"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}
"""The OpenAPI 3.1 schema of one event of an event stream (``schema`` of ``text/event-stream`` describes each event)."""
STREAM_CONTENT = {"text/event-stream": {"schema": EVENT_SCHEMA}}
LOG_KINDS = frozenset({"log", "end"})
LastEventId = Annotated[
    str | None,
    Header(
        alias="Last-Event-ID",
        max_length=100,
        description="Resume after this event (browsers' EventSource send it when they reconnect).",
    ),
]
EVENTS_DOC = """Server-Sent Events (`text/event-stream`) of one job, from the database, until the job ends:

- `state`: the job's status, progress, progress_message, attempt, worker_id, error, model and result, when they change;
- `metrics`: `{"points": [{"id", "key", "step", "epoch", "value", "worker", "time"}]}`, new step and epoch metrics;
- `log`: `{"lines": [{"id", "time", "level", "message"}]}`, new log lines;
- `end`: `{"status"}`, the last event; then the stream closes.

Without `Last-Event-ID` the stream starts at the job's beginning (every point and line so far, then live). Every event
has an id; reconnecting with it in `Last-Event-ID` resumes exactly after that event. A comment line (`: ping`) is sent
every 15 s of silence."""


def stream_response(request: Request, job_id: str, cursor: Cursor, kinds: Collection[str]) -> EventSourceResponse:
    hub: EventHub = request.app.state.events
    return EventSourceResponse(hub.stream(job_id, after=cursor, kinds=kinds), ping=PING_S, sep="\n")


def follow_logs(
    request: Request, rt: ServiceRuntime, caller: Caller, job_id: str, *, after: int | None, last_event_id: str | None
) -> EventSourceResponse:
    """``GET /jobs/{id}/logs?follow=true``: the job's log lines after ``after`` (or ``Last-Event-ID``) as ``log``
    events, then ``end``. Runs in the thread pool (the route is synchronous)."""
    given = Cursor.parse(last_event_id) if last_event_id else Cursor(log=after or 0)
    cursor = events.start(db=rt.db, job_id=job_id, caller=caller, after=given, metrics=False)
    return stream_response(request, job_id, cursor, LOG_KINDS)


@router.get(
    "/jobs/{job_id}/events",
    summary="A job's state, metric points and log lines, pushed as they happen (Server-Sent Events)",
    description=EVENTS_DOC,
    response_class=EventStream,
    responses={200: {"description": "The event stream.", "content": STREAM_CONTENT}},
)
async def job_events(
    job_id: str, request: Request, rt: RuntimeDep, caller: CallerDep, last_event_id: LastEventId = None
) -> EventSourceResponse:
    cursor = await run_in_threadpool(
        events.start, db=rt.db, job_id=job_id, caller=caller, after=Cursor.parse(last_event_id)
    )
    return stream_response(request, job_id, cursor, ALL_KINDS)
