"""The embedded broker (kombu's SQLAlchemy transport on a real SQLite file, a real Celery consumer) keeps only the
messages it still owes: an acknowledged, rejected or requeued message leaves no row behind, so a driver's start
brings back only the messages whose consumer died before its ack (``restore_unacked_embedded``), and the file does
not grow with every job ever run. It was every message ever sent: each start replayed them all (each job logging
``duplicate delivery ignored``) and broker.db grew without limit."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from celery import Celery
from celery.exceptions import Reject

from app.core.settings import Settings
from app.jobs.celery_app import create_celery, restore_unacked_embedded
from app.jobs.consumer import InProcessConsumer

REPO = Path(__file__).resolve().parents[3]

CHILD = textwrap.dedent(
    """
    import pathlib, sys, threading, time
    from app.core.settings import Settings
    from app.jobs.celery_app import create_celery
    from app.jobs.consumer import InProcessConsumer

    var, queue = pathlib.Path(sys.argv[1]), sys.argv[2]
    app = create_celery(Settings(var_dir=var, queue=queue))

    @app.task(name="t.mark", shared=False)
    def mark(key):
        (var / key).touch()

    @app.task(name="t.hang", shared=False)
    def hang(key):
        (var / key).touch()
        time.sleep(600)

    InProcessConsumer(app, concurrency=1, queue=queue).start()
    threading.Event().wait()
    """
)


def _rows(url: str) -> list[tuple[int, int]]:
    """(id, visible) of every message row in the broker's file."""
    with sqlite3.connect(url.removeprefix("sqla+sqlite:///")) as conn:
        return [(int(i), int(v)) for i, v in conn.execute("SELECT id, visible FROM kombu_message ORDER BY id")]


def _until(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def _app(var: Path) -> tuple[Celery, str]:
    settings = Settings(var_dir=var, queue=f"replay-{uuid.uuid4().hex[:8]}")
    return create_celery(settings), settings.queue


def test_finished_messages_leave_no_row_and_a_restart_replays_none(tmp_path: Path) -> None:
    app, queue = _app(tmp_path / "var")
    done: list[str] = []
    rejected: list[str] = []
    finished = threading.Event()

    @app.task(name="t.mark", shared=False)
    def mark(key: str) -> None:
        done.append(key)
        if len(done) == 4:
            finished.set()

    @app.task(name="t.once_later", shared=False)
    def once_later(key: str) -> None:
        if key not in rejected:  # the driver that stops hands a message back: a requeue
            rejected.append(key)
            raise Reject("not now", requeue=True)
        mark(key)

    consumer = InProcessConsumer(app, concurrency=1, queue=queue)
    consumer.start()
    try:
        for key in ("a", "b", "c"):
            app.send_task("t.mark", args=[key], queue=queue)
        app.send_task("t.once_later", args=["d"], queue=queue)
        assert finished.wait(30), done
        url = app.conf.broker_url
        assert _until(lambda: _rows(url) == []), f"finished messages stay in the broker: {_rows(url)}"
    finally:
        consumer.stop(10)
    assert sorted(done) == ["a", "b", "c", "d"] and rejected == ["d"]
    assert restore_unacked_embedded(url) == 0, "a restart would deliver the finished messages again"
    assert _rows(url) == []


def test_only_the_message_of_a_consumer_killed_before_its_ack_comes_back(tmp_path: Path) -> None:
    var = tmp_path / "var"
    var.mkdir()
    app, queue = _app(var)
    url = app.conf.broker_url
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(var), queue], cwd=REPO, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        app.send_task("t.mark", args=["one"], queue=queue)
        app.send_task("t.mark", args=["two"], queue=queue)
        app.send_task("t.hang", args=["three"], queue=queue)
        assert _until((var / "three").exists, 60), "the consumer process never took the jobs"
        assert (var / "one").exists() and (var / "two").exists()
        _until(lambda: len(_rows(url)) == 1, 5)  # the acks of one and two
    finally:
        os.kill(child.pid, signal.SIGKILL)  # the job "three" is running: its message is taken, never acknowledged
        child.wait(30)
    assert restore_unacked_embedded(url) == 1, f"not only the orphan came back: {_rows(url)}"
    assert [visible for _, visible in _rows(url)] == [1]

    again = threading.Event()

    @app.task(name="t.hang", shared=False)
    def hang(key: str) -> None:
        assert key == "three"
        again.set()

    consumer = InProcessConsumer(app, concurrency=1, queue=queue)
    consumer.start()
    try:
        assert again.wait(30), "the orphaned message was not delivered again"
        assert _until(lambda: _rows(url) == []), _rows(url)
    finally:
        consumer.stop(10)
    assert restore_unacked_embedded(url) == 0
