"""The event hub's shared reader against a real database: a client that falls behind what the reader keeps reads the
gap from the database, and still gets every point once, in order."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from app.api import event_hub
from app.api.event_hub import EventHub
from app.core.jobstates import JobStatus
from app.db.base import utcnow
from app.db.session import transaction
from app.services import jobs
from app.services.events import Cursor
from sparktrain.client import parse_events


def _write(db: Any, job_id: str, step: int) -> None:
    with transaction(db) as s:
        jobs.add_metrics(session=s, job_id=job_id, points=[{"key": "loss", "step": step, "value": float(step)}])


def test_a_client_behind_the_kept_batches_catches_up_from_the_database(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(event_hub, "KEPT_BATCHES", 3)
    with transaction(db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={}, framework="torch", name="hub")
        job_id = job.id
    hub = EventHub(lambda: SimpleNamespace(db=db, settings=SimpleNamespace(events_poll_s=0.02)))

    async def run() -> list[int]:
        stream = hub.stream(job_id, after=Cursor())
        chunks = [await anext(stream)]  # the state; then the client stops reading for a while
        feed = hub.feeds[job_id]
        for step in range(1, 13):
            _write(db, job_id, step)
            seen = feed.next_seq
            while feed.next_seq == seen:  # one batch per write
                await asyncio.sleep(0.01)
        assert feed.batches[0].seq > 1, "the client's next batch is no longer kept"
        with transaction(db) as s:
            jobs.transition(session=s, job_id=job_id, sources=[JobStatus.QUEUED], target=JobStatus.CANCELLED,
                            finished_at=utcnow())  # fmt: skip
        chunks += [chunk async for chunk in stream]
        text = b"".join(chunks).decode()
        events = list(parse_events(iter(text.split("\n"))))
        assert events[-1].type == "end"
        return [p["step"] for e in events if e.type == "metrics" for p in e.data["points"]]

    assert asyncio.run(run()) == list(range(1, 13))
    assert hub.feeds == {}
