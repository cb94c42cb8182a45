"""The driver's log lines: plain text (the default) or, with ``SPARKTRAIN_LOG_FORMAT=json``, one JSON object per line
with ``time``, ``level``, ``logger``, ``message`` and, where there is one, the ``request_id`` of the HTTP request and
the ``job_id`` of the job the line is about.

Both ids travel in context variables: the request guard sets the request id for everything that runs on behalf of a
request (its thread-pool work included, since Starlette copies the context), and the job runner sets the job id for
the thread that runs a job. Threads a job starts itself (the torch trainer's monitor) pass ``extra={"job_id": ...}``.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

REQUEST_ID: ContextVar[str | None] = ContextVar("sparktrain_request_id", default=None)
JOB_ID: ContextVar[str | None] = ContextVar("sparktrain_job_id", default=None)

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_HANDLER_MARK = "_sparktrain_handler"
_ACCESS_FIELDS = ("client", "method", "path", "http_version", "status")


class ContextFilter(logging.Filter):
    """Adds ``request_id`` and ``job_id`` to every record (None where there is none); values passed in ``extra``
    win. Lines of uvicorn's access log also get their method, path and status as fields."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = REQUEST_ID.get()
        if getattr(record, "job_id", None) is None:
            record.job_id = JOB_ID.get() or _named_job(record)
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            for name, value in zip(_ACCESS_FIELDS, record.args, strict=True):
                setattr(record, name, value)
        return True


_JOB_ID = re.compile(r"\b[0-9a-f]{32}\b")
_A_JOB = re.compile(r"\bjob ([0-9a-f]{32})\b")


def _named_job(record: logging.LogRecord) -> str | None:
    """The job a line outside any job's scope is about: the argument of Celery's task line (``Task train.torch[...]
    succeeded``: a job's message holds its id), or the job our own lines name (``reconciler: job <id> woken``)."""
    if record.name.startswith("celery") and isinstance(record.args, dict):
        found = _JOB_ID.search(str(record.args.get("args", "")))
        return found.group(0) if found else None
    if record.name.startswith(("sparktrain", "app")):
        try:
            said = record.getMessage()
        except Exception:  # a bad format or argument: the handler reports it, this filter must not raise
            return None
        named = _A_JOB.search(said)
        return named.group(1) if named else None
    return None


class RequeueIsNotAnError(logging.Filter):
    """A message a driver puts back on the queue is no fault, yet two libraries log it as one (any other record of
    their loggers passes unchanged):

    - ``celery.app.trace``: a driver that is stopping, or whose Spark JVM is gone, rejects a message it takes, to be
      queued again for another driver (``Reject(requeue=True)``, app/jobs/celery_app.py). Celery logged each as a
      WARNING with the ``Reject``'s traceback (``Task train.torch[...] reject requeue=True: driver ... is stopping``):
      kept at INFO, without the traceback.
    - ``kombu.transport.virtual.base``: a stopping consumer cancels its consumption while a poll of the broker
      (Redis' BRPOP) is in flight, and the message that poll brings back has no consumer left, so kombu puts it back
      on the queue (``Requeuing undeliverable message for queue 'sparktrain': No consumers.``, a WARNING): at DEBUG,
      which kombu never logs at here (it is usually the message of a job just handed back, which said so).

    An operator read either in the log of a clean stop as a failure; nothing was lost."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if type(error).__name__ == "Reject" and getattr(error, "requeue", False):
            record.exc_info, record.exc_text, level = None, None, logging.INFO
        elif record.name.startswith("kombu") and str(record.msg).startswith("Requeuing undeliverable"):
            level = logging.DEBUG
        else:
            return True
        record.levelno, record.levelname = level, logging.getLevelName(level)
        return logging.getLogger(record.name).isEnabledFor(level)


REQUEUE_LOGGERS = ("celery.app.trace", "kombu.transport.virtual.base")


def quiet_requeues() -> None:
    """Install :class:`RequeueIsNotAnError` on the loggers it is for (once)."""
    for name in REQUEUE_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RequeueIsNotAnError) for f in logger.filters):
            logger.addFilter(RequeueIsNotAnError())


def json_formatter() -> logging.Formatter:
    return JsonFormatter(
        "{levelname}{name}{message}{request_id}{job_id}",
        style="{",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",
        json_ensure_ascii=False,
        reserved_attrs=[*RESERVED_ATTRS, "color_message"],  # uvicorn's copy of the message with terminal colours
    )


def configure_logging(*, level: str, fmt: Literal["text", "json"], stream: Any = None) -> logging.Handler:
    """Send every logger's records (ours, uvicorn's, Celery's, py4j's) to one handler on the root logger, replacing
    the handler an earlier call installed. Returns the handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(json_formatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _HANDLER_MARK, False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    debug = level.upper() == "DEBUG"
    quiet_requeues()
    for name, quiet in LIBRARIES.items():  # at DEBUG they write their internals (Celery's generated source, ...)
        kept = max(QUIET_ALWAYS[name], root.level) if name in QUIET_ALWAYS else logging.NOTSET  # ERROR: not WARNING
        logging.getLogger(name).setLevel(quiet if debug else kept)
    return handler


LIBRARIES = {
    **dict.fromkeys(("celery", "kombu", "redis", "amqp", "asyncio", "urllib3", "botocore", "s3transfer", "httpx",
                     "httpcore", "multipart", "python_multipart", "alembic", "optuna"), logging.INFO),
    "sqlalchemy": logging.WARNING,  # at INFO it echoes every statement, at DEBUG every row
}  # fmt: skip
"""Third-party loggers' levels when sparktrain's level is DEBUG (at any other level they follow the root, but for
:data:`QUIET_ALWAYS`)."""

QUIET_ALWAYS = {"sqlalchemy": logging.WARNING}
"""Loggers kept at their library's own default at every level: SQLAlchemy sets WARNING when it is imported, and
following the root's INFO it logged each statement with its parameters (the broker's polls: ~40 lines a second)."""


@contextmanager
def job_scope(job_id: str) -> Iterator[None]:
    """Log lines written inside carry ``job_id`` (the runner wraps each job in one)."""
    token = JOB_ID.set(job_id)
    try:
        yield
    finally:
        JOB_ID.reset(token)
