"""The broker misbehaving for real, on a Redis server of the test's own (AOF, ``appendfsync always``; never the
shared one) and PostgreSQL: a restart with jobs queued and running loses none and runs none twice (a message lost
while being taken is sent again by the reconciler), and a second delivery of a running job's message (what Redis
does when the visibility timeout passes) does nothing."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu import Connection

from bench.chaos import RedisServer, digits_job
from tests.e2e.chaos_support import log_lines, wait_final

pytestmark = pytest.mark.slow


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as server:
        yield server


def _pending(server: RedisServer, queue: str) -> tuple[int, int]:
    """(messages waiting on ``queue``, messages delivered and not acknowledged)."""
    client = redis.Redis(port=server.port)
    return int(client.llen(queue)), int(client.hlen("unacked"))


def _settled(server: RedisServer, queue: str) -> tuple[int, int]:
    """What is left in the broker once every acknowledgement has landed (or 60 s passed)."""
    deadline = time.monotonic() + 60
    while (left := _pending(server, queue)) != (0, 0) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _ran_once(svc: Any, job: dict[str, Any]) -> None:
    assert job["status"] == "SUCCEEDED", job["error"]
    assert job["attempt"] == 1
    lines = log_lines(svc.client, job["id"])
    assert sum(line.startswith("attempt 1 started") for line in lines) == 1, lines
    assert not any(line.startswith("attempt 2") for line in lines), lines
    versions = [v for m in svc.client.get("/models").json()["items"] for v in m["versions"]]
    assert [v["job_id"] for v in versions].count(job["id"]) == 1


def test_a_redis_restart_loses_no_job_and_runs_none_twice(
    make_service: Callable[..., Any], pg_url: str, broker: RedisServer
) -> None:
    # Redis killed at the wrong moment loses a message being taken (app/jobs/lost_messages.py): the reconciler
    # sends it again after lost_message_after_s; a reconcile pass every second makes that seconds here, not minutes
    with make_service(database_url=pg_url, broker_url=broker.url, consumer_concurrency=2, reconcile_interval_s=1,
                      lost_message_after_s=5) as svc:  # fmt: skip
        queue = svc.runtime.settings.queue
        ids = [svc.train(digits_job(f"restart-{i}", epochs=2, units=64, batch=32))["id"] for i in range(4)]
        deadline = time.monotonic() + 180
        while True:  # some running (their messages delivered, not acknowledged), some still waiting on the queue
            statuses = [svc.client.get(f"/jobs/{i}").json()["status"] for i in ids]
            waiting, unacked = _pending(broker, queue)
            if "RUNNING" in statuses and waiting >= 1 and unacked >= 1:
                break
            assert time.monotonic() < deadline, (statuses, waiting, unacked)
            time.sleep(0.1)

        broker.kill(signal.SIGKILL)  # no goodbye; what it acknowledged is in its append-only file
        time.sleep(3)
        broker.start()

        jobs = [wait_final(svc.client, i) for i in ids]
        # An acknowledgement sent while Redis was down is lost (kombu does not send it again): that message comes
        # back once the visibility timeout passes. Make it come back now, as kombu's sweep would: it does nothing.
        with Connection(broker.url) as conn:
            for tag in redis.Redis(port=broker.port).hkeys("unacked"):
                conn.default_channel.qos.restore_by_tag(tag, leftmost=True)
        assert _settled(broker, queue) == (0, 0), "every message was acknowledged; none waits to run again"
        for job in jobs:
            _ran_once(svc, wait_final(svc.client, job["id"]))


def test_a_second_delivery_of_a_running_jobs_message_does_nothing(
    make_service: Callable[..., Any], pg_url: str, broker: RedisServer
) -> None:
    with make_service(database_url=pg_url, broker_url=broker.url, consumer_concurrency=2) as svc:
        queue = svc.runtime.settings.queue
        # batch 2: seconds of training (at batch 16 under a second), so the second delivery meets it RUNNING
        job_id = svc.train(digits_job("twice", epochs=4, units=256, batch=2))["id"]
        svc.wait(job_id, {"RUNNING"})
        client = redis.Redis(port=broker.port)
        tags = [
            tag for tag, raw in client.hgetall("unacked").items() if job_id in json.loads(raw)[0]["headers"]["argsrepr"]
        ]
        assert len(tags) == 1, "the running job's message is delivered and not acknowledged"
        # exactly what kombu does to an unacknowledged message once the visibility timeout has passed
        with Connection(broker.url) as conn:
            conn.default_channel.qos.restore_by_tag(tags[0], leftmost=True)

        deadline = time.monotonic() + 120
        while not any("ignored" in line for line in log_lines(svc.client, job_id)):
            assert time.monotonic() < deadline, "the second delivery never reached the consumer"
            time.sleep(0.2)
        ignored = next(line for line in log_lines(svc.client, job_id) if "ignored" in line)
        assert "while it was RUNNING" in ignored
        _ran_once(svc, wait_final(svc.client, job_id))
        assert _settled(broker, queue) == (0, 0), "the second delivery was acknowledged, not left to come back"


def test_jobs_that_end_while_redis_is_away_leave_the_consumer_taking_the_next(
    make_service: Callable[..., Any], pg_url: str, broker: RedisServer
) -> None:
    """One consumer thread, its job running, a second job waiting on the queue. Redis goes away and stays away until
    the running job has ended, so that job's acknowledgement fails. kombu's Redis transport then kept the
    consumer's only prefetch slot for ever, and the waiting job stayed QUEUED (app/jobs/redis_transport.py): here it
    runs once Redis is back, and each job runs once."""
    with make_service(database_url=pg_url, broker_url=broker.url, consumer_concurrency=1) as svc:
        # the first at batch 2 (seconds of training; at batch 32 it could end before Redis went away, and then its
        # acknowledgement never met the missing broker), the second as small as it can be
        first = svc.train(digits_job("away-0", epochs=3, units=64, batch=2))["id"]
        second = svc.train(digits_job("away-1", epochs=3, units=64, batch=32))["id"]
        svc.wait(first, {"RUNNING"})
        assert svc.client.get(f"/jobs/{second}").json()["status"] == "QUEUED"
        broker.kill(signal.SIGKILL)
        assert svc.client.get(f"/jobs/{first}").json()["status"] == "RUNNING", "it ended before Redis went away"
        try:
            ended = wait_final(svc.client, first, timeout=300)  # its acknowledgement meets no Redis
        finally:
            broker.start()
        lines = log_lines(svc.client, first)
        jobs = [ended, wait_final(svc.client, second, timeout=120)]
        for job in jobs:
            _ran_once(svc, wait_final(svc.client, job["id"]))
        assert lines, "the first job logged while Redis was away"
