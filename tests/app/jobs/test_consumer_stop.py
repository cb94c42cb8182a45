"""What a stopping driver's consumer does with the messages it holds prints nothing alarming and loses none.

A driver whose job thread is still unwinding when its consumer's stop grace (``SPARKTRAIN_STOP_GRACE_S``) ends
exits without a word from kombu. The job's message was still held (its ack comes at the end of the task, which the
stopped consumer no longer sends), and kombu's exit hook put it back on a channel the stop had half closed:
"Restoring 1 unacknowledged message(s)" and an AttributeError traceback after the driver's last line, on a Redis
broker. The job was handed back with a message of its own, so the held one is left to the broker.

A stopping driver rejects each message it still takes, to be queued again (``Reject(requeue=True)``). On the embedded
broker the copy was written on the channel's session from the pool's thread while the consuming thread used it:
with two threads, "Couldn't reject ...: database is locked" (CRITICAL), "call_soon_ack immediate exec failed"
(ERROR) with tracebacks, and the message lost."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

CHILD = textwrap.dedent(
    """
    import pathlib, sys, threading, time
    from app.core.logging import configure_logging
    from app.core.settings import Settings
    from app.jobs.celery_app import create_celery
    from app.jobs.consumer import InProcessConsumer

    var, queue, broker = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    configure_logging(level="INFO", fmt="text")
    app = create_celery(Settings(var_dir=var, queue=queue, broker_url=broker))
    started = threading.Event()

    @app.task(name="t.unwinds", shared=False, acks_late=True)
    def unwinds(key):
        started.set()
        time.sleep(2)  # a job thread that takes longer to unwind than the grace below

    consumer = InProcessConsumer(app, concurrency=1, queue=queue)
    consumer.start()
    app.send_task("t.unwinds", args=["a"], queue=queue)
    assert started.wait(30)
    consumer.stop(0.2)
    print("stopped", file=sys.stderr, flush=True)
    """
)


@pytest.mark.slow
def test_a_consumer_that_did_not_stop_in_time_leaves_no_restore_or_traceback_at_exit(
    tmp_path: Path, redis_url: str
) -> None:
    queue = f"unwind-{uuid.uuid4().hex[:8]}"
    run = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "var"), queue, redis_url], cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "still unwinding" in run.stderr and "stopped" in run.stderr, run.stderr
    assert "Task t.unwinds" in run.stderr.split("stopped", 1)[1], "the task ended after the stop, before the exit"
    assert "Restoring" not in run.stderr and "Traceback" not in run.stderr, run.stderr


def test_messages_requeued_from_two_threads_at_once_on_the_embedded_broker_all_come_back(tmp_path: Path) -> None:
    from celery.exceptions import Reject

    from app.core.logging import configure_logging
    from app.core.settings import Settings
    from app.jobs.celery_app import create_celery
    from app.jobs.consumer import InProcessConsumer

    stream = io.StringIO()
    handler = configure_logging(level="INFO", fmt="text", stream=stream)
    settings = Settings(var_dir=tmp_path / "var", queue=f"requeues-{uuid.uuid4().hex[:8]}")
    app = create_celery(settings)
    count, taken, done = 30, dict[str, int](), set[str]()
    finished = threading.Event()

    @app.task(name="t.later", shared=False, acks_late=True)
    def later(key: str) -> None:
        taken[key] = taken.get(key, 0) + 1
        if taken[key] == 1:
            raise Reject("driver d1 is stopping", requeue=True)
        done.add(key)
        if len(done) == count:
            finished.set()

    consumer = InProcessConsumer(app, concurrency=2, queue=settings.queue)
    consumer.start()
    try:
        for key in range(count):
            app.send_task("t.later", args=[str(key)], queue=settings.queue)
        finished.wait(60)
    finally:
        consumer.stop(10)
        logging.getLogger().removeHandler(handler)
    loud = [line for line in stream.getvalue().splitlines() if " ERROR " in line or " CRITICAL " in line]
    assert loud == [] and "Traceback" not in stream.getvalue(), stream.getvalue()[-5000:]
    assert len(done) == count, f"requeued messages lost: {sorted(set(map(str, range(count))) - done)}"
