"""What a job's ``error`` says when its work raised: a stable reason and a readable line.

Spark wraps executor failures in Java exceptions (py4j), whose text carries the executor's JVM stack and, for
Python errors on executors, the worker's traceback: keep the words and the end of the traceback, drop the frames.
"""

from __future__ import annotations

from typing import Any

from app.core.errors import AppError
from workers.context import JobFailure

MAX_MESSAGE = 4000
# What Spark says when a task's Python worker or executor died (and what gloo says on the surviving ranks)
_WORKER_LOST = (
    "Python worker exited unexpectedly",
    "ExecutorLostFailure",
    "Executor lost",
    "Connection closed by peer",
    "Connection reset by peer",
)


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """(reason, message) for the job's ``error``: a readable line, never a Java object that does not pickle."""
    if isinstance(exc, JobFailure):
        return exc.reason, exc.message[:MAX_MESSAGE]
    if isinstance(exc, AppError):
        return "INVALID_REQUEST", exc.detail[:MAX_MESSAGE]
    java = getattr(exc, "java_exception", None)
    if java is not None:
        message = _java_message(java)
        if any(sign in str(java) or sign in message for sign in _WORKER_LOST):
            return "WORKER_LOST", message
        return "SPARK_ERROR", message
    if type(exc).__module__.startswith("pyspark"):
        return "SPARK_ERROR", f"{type(exc).__name__}: {exc}"[:MAX_MESSAGE]
    return "INTERNAL", f"{type(exc).__name__}: {exc}"[:MAX_MESSAGE]


def _java_message(java: Any) -> str:
    """The innermost cause's message; for Python errors on executors, the end of the worker's traceback."""
    try:
        cause = java
        while cause.getCause() is not None:
            cause = cause.getCause()
        text = str(cause.toString())
    except Exception:
        text = str(java)
    # Spark puts the executor's stack into the message: keep the words, drop the JVM frames
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("at ") and line.strip())
    if "Traceback (most recent call last)" in text:
        return text[-MAX_MESSAGE:]
    return text[:MAX_MESSAGE]
