"""The reconciler's look for lost messages, on a real Redis broker and a real database (SQLite and PostgreSQL): a
QUEUED job whose message is on none of its queues for ``lost_message_after_s`` is sent again (a real Celery message,
found on the queue afterwards) and says so in its log; jobs whose message is waiting, that wait for their owner's
quota, whose retry is not sent yet, or that already started are left alone; one still missing after being sent again
is sent again only after twice as long. The whole loss (Redis killed while jobs are taken) is
tests/e2e/test_chaos_broker.py."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from sqlalchemy import update

from app.core.jobstates import JobStatus
from app.core.settings import Settings
from app.db.models import Job, JobLog
from app.db.session import transaction
from app.jobs.celery_app import create_celery, send_job
from app.jobs.lost_messages import LostMessages, job_id_of
from app.services import attempts, jobs

AFTER_S = 0.5


@pytest.fixture
def queue(redis_url: str) -> Iterator[str]:
    name = f"lost-{uuid.uuid4().hex[:8]}"
    yield name
    redis.Redis.from_url(redis_url).delete(name)


@pytest.fixture
def settings(redis_url: str, queue: str) -> Settings:
    return Settings(broker_url=redis_url, queue=queue, lost_message_after_s=AFTER_S)


@pytest.fixture
def sweep(settings: Settings, db: Any) -> Iterator[tuple[LostMessages, list[str]]]:
    celery = create_celery(settings)
    sent: list[str] = []

    def send(task: str, job_id: str, queue: str) -> None:
        send_job(celery, task, job_id, queue)
        sent.append(job_id)

    lost = LostMessages(settings=settings, db=db, send=send)
    yield lost, sent
    lost.close()


def _queued(db: Any, **attempt: Any) -> str:
    with transaction(db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={"name": "x"}, framework="torch")
        if attempt:
            job.attempts = attempts.update_attempt(job, job.attempt, **attempt)
        return job.id


def _on_queue(redis_url: str, queue: str) -> list[str | None]:
    return [job_id_of(raw) for raw in redis.Redis.from_url(redis_url).lrange(queue, 0, -1)]


def test_a_queued_job_whose_message_is_nowhere_is_sent_again_once_missing_long_enough(
    db: Any, sweep: tuple[LostMessages, list[str]], redis_url: str, queue: str
) -> None:
    lost, sent = sweep
    job_id = _queued(db)  # committed QUEUED, its message never reached the broker (or the broker lost it)
    assert lost.run_once() == [], "missing for the first time: only noted"
    time.sleep(AFTER_S + 0.1)
    actions = lost.run_once()
    assert [a["job_id"] for a in actions] == [job_id] and sent == [job_id]
    assert _on_queue(redis_url, queue) == [job_id], "a real message for the job is on its queue now"
    with db() as s:
        lines = [line.message for line in s.query(JobLog).filter_by(job_id=job_id)]
        assert s.get(Job, job_id).status == JobStatus.QUEUED
    assert any("in no queue of the broker" in line and "sent again" in line for line in lines), lines
    time.sleep(AFTER_S + 0.1)
    assert lost.run_once() == [], "its message is waiting now: nothing more is sent"


def test_jobs_whose_message_waits_or_is_not_due_or_that_started_are_left_alone(
    db: Any, sweep: tuple[LostMessages, list[str]], settings: Settings, redis_url: str, queue: str
) -> None:
    lost, sent = sweep
    waiting = _queued(db)
    send_job(create_celery(settings), "train.torch", waiting, queue)
    _queued(db, sent=False, queued_at="2026-01-01T00:00:00+00:00")  # a retry whose message is due later
    over_quota = _queued(db)
    started = _queued(db)
    with transaction(db) as s:
        s.execute(update(Job).where(Job.id == over_quota).values(waiting_for="concurrent_jobs"))
        jobs.transition(session=s, job_id=started, sources=[JobStatus.QUEUED], target=JobStatus.STARTING)
    for _ in range(3):
        assert lost.run_once() == []
        time.sleep(AFTER_S + 0.1)
    assert sent == []
    assert _on_queue(redis_url, queue) == [waiting]


def test_a_job_still_missing_after_being_sent_again_waits_twice_as_long_for_the_next_copy(
    db: Any, sweep: tuple[LostMessages, list[str]], redis_url: str, queue: str
) -> None:
    lost, sent = sweep
    job_id = _queued(db)
    client = redis.Redis.from_url(redis_url)
    lost.run_once()
    time.sleep(AFTER_S + 0.1)
    assert [a["job_id"] for a in lost.run_once()] == [job_id]
    client.delete(queue)  # lost again (or taken by a consumer that has not started it)
    lost.run_once()
    time.sleep(AFTER_S + 0.1)
    assert lost.run_once() == [], "the second copy waits 2 x lost_message_after_s"
    time.sleep(AFTER_S + 0.1)
    assert [a["job_id"] for a in lost.run_once()] == [job_id]
    assert sent == [job_id, job_id]


def test_job_id_of_reads_a_celery_message_and_ignores_anything_else(
    settings: Settings, redis_url: str, queue: str
) -> None:
    send_job(create_celery(settings), "evaluate.run", "the-job", queue)
    assert _on_queue(redis_url, queue) == ["the-job"]
    assert job_id_of(b"not json") is None
    assert job_id_of(b'{"body": "W1tdLCB7fSwge31d", "properties": {"body_encoding": "base64"}}') is None  # no arguments
