"""GET /jobs/{id}/events and GET /jobs/{id}/logs?follow=true over real HTTP, against a real database.

The service runs without a job consumer, and the test writes the job's state, metric points and log lines itself
through the same service functions the job runner uses (one committed transaction per batch, as
app/jobs/context.py does), so it decides exactly when each point appears relative to the client's connections.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from app.core.jobstates import JobStatus
from app.db.base import utcnow
from app.db.session import transaction
from app.services import jobs
from sparktrain.client import Event, parse_events
from tests.helpers import Service, taxi_request


@pytest.fixture
def quiet(make_service: Any, db_url: str) -> Iterator[Service]:
    """A service on SQLite and on PostgreSQL whose jobs stay QUEUED until the test moves them."""
    with make_service(database_url=db_url, in_process_consumer=False, events_poll_s=0.05) as svc:
        yield svc


def _queued(svc: Service) -> str:
    return str(svc.train(taxi_request("events"))["id"])


def _move(svc: Service, job_id: str, source: JobStatus, target: JobStatus, **values: Any) -> None:
    with transaction(svc.runtime.db) as s:
        assert jobs.transition(session=s, job_id=job_id, sources=[source], target=target, **values)


def _write_points(svc: Service, job_id: str, steps: range, workers: int = 2) -> None:
    for step in steps:
        points = [
            {"key": "loss", "step": step, "epoch": step // 10, "value": 1.0 / step, "worker": w} for w in range(workers)
        ]
        with transaction(svc.runtime.db) as s:
            jobs.add_metrics(session=s, job_id=job_id, points=points)


def _log(svc: Service, job_id: str, message: str) -> None:
    with transaction(svc.runtime.db) as s:
        jobs.add_log(session=s, job_id=job_id, message=message)


@contextmanager
def _stream(svc: Service, path: str, last_event_id: str | None = None) -> Iterator[Iterator[Event]]:
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    with (
        httpx.Client(base_url=svc.url, timeout=httpx.Timeout(30, read=30)) as client,
        client.stream("GET", path, headers=headers) as response,
    ):
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield parse_events(response.iter_lines())


def _points(events: list[Event]) -> list[tuple[int, int | None]]:
    return [(p["step"], p["worker"]) for e in events if e.type == "metrics" for p in e.data["points"]]


def test_a_client_that_joins_mid_job_and_reconnects_gets_every_point_once_in_order(quiet: Service) -> None:
    job_id = _queued(quiet)
    _move(quiet, job_id, JobStatus.QUEUED, JobStatus.STARTING, started_at=utcnow())
    _move(quiet, job_id, JobStatus.STARTING, JobStatus.RUNNING)
    _write_points(quiet, job_id, range(1, 21))  # written before the client connects
    first: list[Event] = []
    wrote = False
    with _stream(quiet, f"/jobs/{job_id}/events") as events:
        for event in events:
            first.append(event)
            if len(_points(first)) >= 40 and not wrote:
                _write_points(quiet, job_id, range(21, 31))  # while it is connected
                wrote = True
            if len(_points(first)) >= 50:
                break  # the client goes away mid-job
    _write_points(quiet, job_id, range(31, 61))  # while it is away
    _log(quiet, job_id, "epoch 5 done")
    second: list[Event] = []
    finished = False
    with _stream(quiet, f"/jobs/{job_id}/events", last_event_id=first[-1].id) as events:
        for event in events:
            second.append(event)
            if len(_points(first + second)) >= 120 and not finished:
                _write_points(quiet, job_id, range(61, 71))
                _move(quiet, job_id, JobStatus.RUNNING, JobStatus.SUCCEEDED, finished_at=utcnow(), progress=1.0)
                finished = True
    expected = [(step, worker) for step in range(1, 71) for worker in range(2)]
    assert _points(first + second) == expected  # every point, once, in the order written
    assert second[-1].type == "end" and second[-1].data == {"status": "SUCCEEDED"}
    states = [e.data["status"] for e in first + second if e.type == "state"]
    assert states[0] == "RUNNING" and states[-1] == "SUCCEEDED"
    assert [line["message"] for e in second if e.type == "log" for line in e.data["lines"]] == ["epoch 5 done"]
    ids = [e.id for e in first + second if e.type != "end"]  # "end" repeats the position of the last event
    assert len(set(ids)) == len(ids) and second[-1].id == ids[-1], "every event has its own id"

    with _stream(quiet, f"/jobs/{job_id}/events") as events:  # after the end: the whole history, then end
        replay = list(events)
    assert _points(replay) == expected and replay[-1].type == "end"
    hub = quiet.app.state.events
    _until(lambda: not hub.feeds, "the job's reader stops once its clients left")


def _until(condition: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_client_that_disconnects_frees_its_reader(quiet: Service) -> None:
    job_id = _queued(quiet)
    hub = quiet.app.state.events
    with _stream(quiet, f"/jobs/{job_id}/events") as events:
        assert next(events).type == "state"
        assert hub.clients == 1 and job_id in hub.feeds
        feed = hub.feeds[job_id]
        reads = feed.reads
        _until(lambda: feed.reads > reads + 3, "the reader polls the database while a client is there")
    _until(lambda: hub.clients == 0 and not hub.feeds, "the stream and its reader end with the client")
    assert feed.task.done()
    reads = feed.reads
    time.sleep(0.3)
    assert feed.reads == reads, "nothing reads the database for a job nobody follows"
    metrics = quiet.client.get("/metrics").text
    assert "sparktrain_sse_clients 0.0" in metrics


def test_logs_follow_streams_lines_and_ends_with_the_job(quiet: Service) -> None:
    job_id = _queued(quiet)
    _log(quiet, job_id, "first")
    lines: list[str] = []
    with _stream(quiet, f"/jobs/{job_id}/logs?follow=true") as events:
        for event in events:
            assert event.type in ("log", "end")
            if event.type == "log":
                lines += [line["message"] for line in event.data["lines"]]
                assert all(line["time"].endswith("Z") for line in event.data["lines"]), event.data  # as in /logs
                if lines == ["first"]:
                    _write_points(quiet, job_id, range(1, 3))  # metric points are not sent to a log follower
                    _log(quiet, job_id, "second")
                    with transaction(quiet.runtime.db) as s:
                        jobs.request_cancel(session=s, job_id=job_id)
            else:
                assert event.data == {"status": "CANCELLED"}
    assert lines == ["first", "second"]
    after = quiet.client.get(f"/jobs/{job_id}/logs").json()["lines"][0]["id"]
    with _stream(quiet, f"/jobs/{job_id}/logs?follow=true&after={after}") as events:
        assert [e.type for e in events] == ["log", "end"]


def test_bad_requests_are_problems(quiet: Service) -> None:
    missing = quiet.client.get("/jobs/" + "0" * 32 + "/events", headers={"x-request-id": "req-404"})
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"
    assert missing.json()["request_id"] == "req-404" and "No job" in missing.json()["detail"]
    job_id = _queued(quiet)
    for bad in ("nonsense", "1-2", "99999999-0-0"):  # malformed, or ahead of the job's events
        answer = quiet.client.get(f"/jobs/{job_id}/events", headers={"Last-Event-ID": bad})
        assert answer.status_code == 400, bad
        assert "Last-Event-ID" in answer.json()["detail"]


def test_another_owners_job_streams_nothing(make_service: Any) -> None:
    keys = "alice-0123456789abcdef:alice,bobby-0123456789abcdef:bob"
    with make_service(api_keys=keys, in_process_consumer=False) as svc:
        job_id = svc.train(taxi_request("alice-job"), headers={"Authorization": "Bearer alice-0123456789abcdef"})["id"]
        for path in (f"/jobs/{job_id}/events", f"/jobs/{job_id}/logs?follow=true"):
            assert svc.client.get(path).status_code == 401
            bob = svc.client.get(path, headers={"Authorization": "Bearer bobby-0123456789abcdef"})
            assert bob.status_code == 404 and bob.headers["content-type"] == "application/problem+json"
