"""The in-process consumer: runs tasks on the threads pool, and stopping one consumer leaves others running."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest

from app.core.settings import Settings
from app.jobs.celery_app import create_celery, restore_unacked_embedded
from app.jobs.consumer import InProcessConsumer


def _app_and_marker(tmp_path: Path, name: str) -> tuple[object, dict[str, threading.Event], str]:
    settings = Settings(var_dir=tmp_path / name, queue=f"q-{uuid.uuid4().hex[:8]}")
    app = create_celery(settings)
    seen: dict[str, threading.Event] = {}

    @app.task(name="t.mark", shared=False)
    def mark(key: str) -> None:
        seen.setdefault(key, threading.Event()).set()

    return app, seen, settings.queue


def test_runs_tasks_and_one_consumer_per_process(tmp_path: Path) -> None:
    app_a, seen_a, queue_a = _app_and_marker(tmp_path, "a")
    app_b, _, queue_b = _app_and_marker(tmp_path, "b")
    a = InProcessConsumer(app_a, concurrency=1, queue=queue_a)  # type: ignore[arg-type]
    a.start()
    try:
        seen_a["x"] = threading.Event()
        app_a.send_task("t.mark", args=["x"], queue=queue_a)  # type: ignore[attr-defined]
        assert seen_a["x"].wait(15)
        with pytest.raises(RuntimeError, match="one per process"):
            InProcessConsumer(app_b, concurrency=1, queue=queue_b).start()  # type: ignore[arg-type]
    finally:
        a.stop(10)
    assert not a.alive()
    b = InProcessConsumer(app_b, concurrency=1, queue=queue_b)  # type: ignore[arg-type]
    b.start()  # the slot is free again
    b.stop(10)


def test_orphaned_embedded_messages_come_back(tmp_path: Path) -> None:
    import sqlite3

    app, _, queue = _app_and_marker(tmp_path, "c")
    app.send_task("t.mark", args=["y"], queue=queue)  # type: ignore[attr-defined]
    url = app.conf.broker_url  # type: ignore[attr-defined]
    db = url.removeprefix("sqla+sqlite:///")
    with sqlite3.connect(db) as conn:  # a consumer took it and died before the ack
        conn.execute("UPDATE kombu_message SET visible = 0")
    assert restore_unacked_embedded(url) == 1
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM kombu_message WHERE visible = 1").fetchone()[0] == 1
    assert restore_unacked_embedded("redis://127.0.0.1:6379/0") == 0
