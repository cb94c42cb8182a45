"""SPARKTRAIN_LOG_FORMAT=json: one JSON object per line, with the request id of a request and the job id of a job."""

from __future__ import annotations

import io
import json
import logging
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from app.core.logging import REQUEST_ID, configure_logging, job_scope


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = configure_logging(level="INFO", fmt="json", stream=stream)
    yield stream
    logging.getLogger().removeHandler(handler)


def _records(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_each_line_is_one_object_with_level_logger_and_ids(lines: io.StringIO) -> None:
    token = REQUEST_ID.set("req-1")
    try:
        with job_scope("job-1"):
            logging.getLogger("sparktrain.jobs").warning("two\nlines and ünïcode")
        logging.getLogger("sparktrain.api").info("outside a job", extra={"job_id": "job-2"})
    finally:
        REQUEST_ID.reset(token)
    logging.getLogger("other").error("no ids")
    first, second, third = _records(lines)
    assert first["level"] == "WARNING" and first["logger"] == "sparktrain.jobs"
    assert first["message"] == "two\nlines and ünïcode" and first["time"].endswith("+00:00")
    assert (first["request_id"], first["job_id"]) == ("req-1", "job-1")
    assert (second["request_id"], second["job_id"]) == ("req-1", "job-2")
    assert (third["request_id"], third["job_id"]) == (None, None)


def test_lines_about_a_job_outside_its_scope_carry_its_id(lines: io.StringIO) -> None:
    """Celery's task lines (after the runner's scope ended) and the reconciler's "job <id> woken" had job_id null
    (operator walkthrough); Celery's line is logged here with Celery's own format and arguments."""
    from celery.app.trace import LOG_SUCCESS

    job = "6243" + "0" * 28
    logging.getLogger("celery.app.trace").info(
        LOG_SUCCESS.strip(),
        {
            "id": "task-1",
            "name": "train.torch",
            "return_value": "None",
            "runtime": 1.5,
            "args": f"['{job}']",
            "kwargs": "{}",
        },
    )
    logging.getLogger("sparktrain").info("reconciler: job %s woken", job)
    logging.getLogger("sparktrain").info("a request id %s is not a job", "f" * 32)
    celery, ours, other = _records(lines)
    assert celery["message"].startswith("Task train.torch[task-1] succeeded") and celery["job_id"] == job
    assert ours["job_id"] == job and other["job_id"] is None


def test_requests_log_their_request_id(lines: io.StringIO, make_service: Any) -> None:
    with make_service(api_keys="alice-0123456789abcdef:alice", in_process_consumer=False) as svc:
        answer = svc.client.get("/jobs", headers={"X-Request-ID": "abc-123"})
        made = svc.client.get("/jobs").headers["x-request-id"]
    assert answer.status_code == 401 and answer.json()["request_id"] == "abc-123"
    refused = [r for r in _records(lines) if r["logger"] == "sparktrain.api.auth"]
    assert [r["request_id"] for r in refused] == ["abc-123", made]


@contextmanager
def _logging_at(level: str) -> Iterator[None]:
    """Logging configured at ``level`` inside, and back at INFO (without a handler of its own) after."""
    handler = configure_logging(level=level, fmt="text", stream=io.StringIO())
    try:
        yield
    finally:
        logging.getLogger().removeHandler(handler)
        configure_logging(level="INFO", fmt="text", stream=io.StringIO())
        logging.getLogger().removeHandler(logging.getLogger().handlers[-1])


def test_debug_is_sparktrains_and_leaves_libraries_at_info() -> None:
    """SPARKTRAIN_LOG_LEVEL=debug printed Celery's generated source and redis's probes, and SQLAlchemy every row."""
    with _logging_at("DEBUG"):
        assert logging.getLogger().level == logging.DEBUG
        assert not logging.getLogger("celery.utils.functional").isEnabledFor(logging.DEBUG)
        assert logging.getLogger("celery.worker").isEnabledFor(logging.INFO)
        assert not logging.getLogger("sqlalchemy.engine.Engine").isEnabledFor(logging.INFO)
    assert logging.getLogger("celery.utils.functional").level == logging.NOTSET


def test_info_logs_no_sql_statements() -> None:
    """At INFO (the default) a query writes no line: SQLAlchemy's logger followed the root and logged every statement
    with its bound parameters (~40 lines a second from an idle driver's broker polls)."""
    from sqlalchemy import create_engine, text

    stream = io.StringIO()
    configure_logging(level="DEBUG", fmt="text", stream=io.StringIO())  # and back: the levels DEBUG set are undone
    handler = configure_logging(level="INFO", fmt="text", stream=stream)
    try:
        engine = create_engine("sqlite://")
        with engine.connect() as connection:
            assert connection.execute(text("SELECT 'a-secret-parameter' AS x")).scalar() == "a-secret-parameter"
        engine.dispose()
        logging.getLogger("celery.worker").info("a library's INFO line")
    finally:
        logging.getLogger().removeHandler(handler)
    assert "SELECT" not in stream.getvalue() and "a-secret-parameter" not in stream.getvalue()
    assert "a library's INFO line" in stream.getvalue()  # the other libraries follow the root


def test_a_level_above_warning_keeps_sqlalchemy_above_it_too() -> None:
    """SPARKTRAIN_LOG_LEVEL=ERROR: SQLAlchemy's warnings printed anyway (its logger at WARNING; no handler level)."""
    with _logging_at("ERROR"):
        assert not logging.getLogger("sqlalchemy.pool").isEnabledFor(logging.WARNING)
    assert logging.getLogger("sqlalchemy").level == logging.WARNING


def test_a_message_put_back_on_the_queue_is_logged_as_information_not_as_a_failure(
    lines: io.StringIO, tmp_path: Path
) -> None:
    """A stopping driver rejects the messages it still takes, to be queued again (``Reject(requeue=True)``); Celery
    logged each as a WARNING with the Reject's traceback, and an operator read the clean stop as a failed one. Here
    a real consumer on the embedded broker runs a task that rejects its message once, as a stopping driver does."""
    from celery.exceptions import Reject

    from app.core.settings import Settings
    from app.jobs.celery_app import create_celery
    from app.jobs.consumer import InProcessConsumer

    settings = Settings(var_dir=tmp_path / "var", queue=f"requeue-{uuid.uuid4().hex[:8]}")
    app = create_celery(settings)
    job = "7e57" + "0" * 28
    ran: list[str] = []
    done = threading.Event()

    @app.task(name="t.later", shared=False, acks_late=True)
    def later(job_id: str) -> None:
        ran.append(job_id)
        if len(ran) == 1:
            raise Reject(f"driver d1 is stopping (job {job_id})", requeue=True)
        done.set()

    consumer = InProcessConsumer(app, concurrency=1, queue=settings.queue)
    consumer.start()
    try:
        app.send_task("t.later", args=[job], queue=settings.queue)
        assert done.wait(30), ran
    finally:
        consumer.stop(10)
    [reject] = [r for r in _records(lines) if r["logger"] == "celery.app.trace" and "reject" in r["message"]]
    assert reject["level"] == "INFO" and "exc_info" not in reject, reject
    assert reject["message"].endswith(f"driver d1 is stopping (job {job})") and reject["job_id"] == job


def test_kombus_requeue_of_a_message_without_a_consumer_is_not_a_warning(lines: io.StringIO) -> None:
    """A stopping consumer cancels its consumption while a poll of Redis is in flight; kombu puts the message that
    poll brings back on the queue, and said so as a WARNING (kombu's own format and logger, as it logs it)."""
    from kombu.transport.virtual.base import W_NO_CONSUMERS

    logging.getLogger("kombu.transport.virtual.base").warning(W_NO_CONSUMERS, "sparktrain")
    logging.getLogger("kombu.transport.virtual.base").warning("any other warning of kombu's")
    [other] = _records(lines)
    assert (other["level"], other["message"]) == ("WARNING", "any other warning of kombu's")
