"""What a job's ``error`` says when its work raised: a stable reason and a readable line.

Spark wraps executor failures in Java exceptions (py4j), whose text carries the executor's JVM stack and, for
Python errors on executors, the worker's traceback: keep the words and the end of the traceback, drop the frames.
"""

from __future__ import annotations

import errno
import re
from typing import Any

from app.core.errors import AppError
from app.db.session import unavailable
from workers.context import JobFailure
from workers.storage import StorageError

MAX_MESSAGE = 4000
# What Spark says when a task's Python worker or executor died (and what gloo says on the surviving ranks)
_WORKER_LOST = (
    "Python worker exited unexpectedly",
    "ExecutorLostFailure",
    "Executor lost",
    "Connection closed by peer",
    "Connection reset by peer",
)


# What a full disk, a quota or a read-only mount says, in Python (errno), Java (IOException) and on executors
_STORAGE_FULL = ("No space left on device", "Disk quota exceeded", "[Errno 28]", "[Errno 122]")
_STORAGE_READ_ONLY = ("Read-only file system", "[Errno 30]")
_STORAGE_ERRNOS = {errno.ENOSPC: "STORAGE_FULL", errno.EDQUOT: "STORAGE_FULL", errno.EROFS: "STORAGE_UNAVAILABLE"}
# workers/storage.py's errors, as an executor's traceback ends: "StorageError: STORAGE_FULL: ..."
_STORAGE_ERROR = re.compile(r"StorageError: (STORAGE_[A-Z]+): (.*)")
# workers/training/torch/remote.py's: a device the task cannot use, and what to change ("... has no usable CUDA; ...")
_DEVICE_ERROR = re.compile(r"\bDeviceError: (.+)")


STORAGE_FIXES = {
    "STORAGE_FULL": "free space in the artifact store (SPARKTRAIN_ARTIFACT_ROOT, or SPARKTRAIN_ARTIFACT_STORE when "
    "set) or give it more",
    "STORAGE_UNAVAILABLE": "make the artifact store reachable and writable (SPARKTRAIN_ARTIFACT_ROOT mounted "
    "read-write, or SPARKTRAIN_ARTIFACT_STORE and its credentials when set)",
}
"""What to do about a storage failure: the end of its message, whichever way it was reported."""


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """(reason, message) for the job's ``error``: a readable line, never a Java object that does not pickle. A
    storage failure's message ends with what to do about it (:data:`STORAGE_FIXES`)."""
    reason, message = _describe(exc)
    fix = STORAGE_FIXES.get(reason)
    if fix is None or fix in message:
        return reason, message
    fix = f"; {fix}, and the job runs again after SPARKTRAIN_RETRY_DELAY_S while attempts remain"
    return reason, message[: MAX_MESSAGE - len(fix)] + fix


def _describe(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, JobFailure):
        return exc.reason, exc.message[:MAX_MESSAGE]
    if isinstance(exc, AppError):
        return "INVALID_REQUEST", exc.every_problem()[:MAX_MESSAGE]
    if isinstance(exc, StorageError):
        return exc.reason, exc.detail[:MAX_MESSAGE]
    if unavailable(exc):  # past the runner's retries (SPARKTRAIN_DB_RETRY_S): not the job's fault
        return "DATABASE_UNAVAILABLE", (
            f"the database did not answer within SPARKTRAIN_DB_RETRY_S ({type(exc).__name__}: {str(exc)[:500]}); the "
            "job runs again after SPARKTRAIN_RETRY_DELAY_S while attempts remain"
        )
    if isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS:
        return _STORAGE_ERRNOS[exc.errno], f"writing to the artifact store failed: {exc}"[:MAX_MESSAGE]
    java = getattr(exc, "java_exception", None)
    if java is not None:
        text = _java_text(java)
        known = _storage(text) or _device(text)
        if known is not None:
            return known
        message = _java_message(text)
        if _SLOTS_SHORT in text:  # the cluster's state, not the job's: its next attempt waits for the slots
            return "NO_EXECUTORS", f"{SLOTS_SHORT_SAID}: {message}"[:MAX_MESSAGE]
        if any(sign in str(java) or sign in text for sign in _WORKER_LOST):
            return "WORKER_LOST", _worker_lost(message)
        return "SPARK_ERROR", message
    text = f"{type(exc).__name__}: {exc}"
    known = _storage(text) or _device(text)
    if known is not None:
        return known
    if type(exc).__module__.startswith("pyspark"):
        return "SPARK_ERROR", text[:MAX_MESSAGE]
    return "INTERNAL", text[:MAX_MESSAGE]


_SLOTS_SHORT = "BarrierJobSlotsNumberCheckFailed"
SLOTS_SHORT_SAID = (
    "the cluster had fewer task slots than the job's barrier stage needs when Spark submitted it (an executor was "
    "lost, and Spark heard of it after the job had counted its slots); the job runs again after "
    "SPARKTRAIN_RETRY_DELAY_S and waits for its slots"
)
"""Spark refuses a barrier stage wider than the cluster's slots within seconds (spark-defaults.conf's
``maxConcurrentTasksCheck``): after a lost executor that Spark had not yet removed (a surviving rank's error ended
the attempt first), the retry counted the slots it had before."""
WORKER_LOST_SAID = "a worker of the job's barrier stage was lost (its executor or its Python process died)"
_PEER_GONE = ("Connection reset by peer", "Connection closed by peer")


def _worker_lost(said: str) -> str:
    """The loss in sparktrain's words first, then Spark's (``ExecutorLostFailure (executor 0 exited ...) Reason:
    Command exited with code 137``) or, when a surviving worker's error came first, gloo's, which names no loss
    ("Read error ...: Connection reset by peer. This is typically caused by a remote worker hanging ... GLHF!")."""
    heard = "; a surviving worker saw its connection to it break: " if any(p in said for p in _PEER_GONE) else ": "
    return f"{WORKER_LOST_SAID}{heard}{said}"[:MAX_MESSAGE]


def _storage(text: str) -> tuple[str, str] | None:
    """A storage failure reported from an executor or by a library (xgboost, Spark's writers), by its words."""
    found = _STORAGE_ERROR.search(text)
    if found is not None:
        return found.group(1), found.group(2)[:MAX_MESSAGE]
    for signs, reason, state in ((_STORAGE_FULL, "STORAGE_FULL", "full"),
                                 (_STORAGE_READ_ONLY, "STORAGE_UNAVAILABLE", "read-only")):  # fmt: skip
        if any(sign in text for sign in signs):
            line = next((ln for ln in reversed(text.splitlines()) if any(s in ln for s in signs)), text)
            return reason, f"the artifact store is {state}: {line.strip()}"[:MAX_MESSAGE]
    return None


def _device(text: str) -> tuple[str, str] | None:
    """A torch task's device that cannot be used there (``device: "cuda"`` without a GPU or without CUDA), as its
    executor's traceback ends: only its sentence, which says what to change, not Spark's ~1.5 KB around it."""
    found = _DEVICE_ERROR.search(text)
    return None if found is None else ("DEVICE_UNAVAILABLE", found.group(1).strip()[:MAX_MESSAGE])


def _java_text(java: Any) -> str:
    """The innermost cause's text, without the JVM's frames (Spark puts the executor's stack into it)."""
    try:
        cause = java
        while cause.getCause() is not None:
            cause = cause.getCause()
        text = str(cause.toString())
    except Exception:
        text = str(java)
    return "\n".join(line for line in text.splitlines() if not _JVM_FRAME.match(line) and line.strip())


def _java_message(text: str) -> str:
    """The innermost cause's words; for Python errors on executors, the error the worker's traceback ends with."""
    found = _XGBOOST_ERROR.search(text)
    if found is not None:  # its words, without the Python traceback and the C++ backtrace (~2,000 characters)
        return f"xgboost: {found.group(1).strip()}"[:MAX_MESSAGE]
    raised = _python_error(text)
    if raised is not None:  # the error's own words; the job's log keeps the traceback (executor_traceback)
        return raised[:MAX_MESSAGE]
    return text[:MAX_MESSAGE]


_FRAME = re.compile(r'^\s*File "([^"]*)", line (\d+), in (.*)$', re.M)
_JVM_FRAME = re.compile(r"^\s*at [\w$.<>/]+\(.*\)$")
_JAVA_LINE = re.compile(r"^(?:\s*at [\w$.<>/]+\(.*\)$|Caused by:|Driver stacktrace:|org\.apache\.|java\.|py4j\.)")
"""Where Spark's text goes on after an executor's traceback: a JVM frame, a cause, the driver's stack."""


def _python_error(text: str) -> str | None:
    """An executor's Python error as its traceback ends (``ValueError: ...``), and where it was raised: Spark's
    ~1.5 KB of stage failure, frames and server paths say nothing more to the job's owner."""
    if "Traceback (most recent call last)" not in text:
        return None
    frames = list(_FRAME.finditer(text))
    if not frames:
        return None
    last = frames[-1]
    lines = text[last.end() :].splitlines()
    while lines and (not lines[0].strip() or lines[0].startswith("    ")):  # the frame's code and its carets
        lines.pop(0)
    words = []
    for line in lines:
        if _JAVA_LINE.match(line):
            break
        words.append(line.strip())
    said = re.sub(r"\s*SQLSTATE: \w+$", "", " ".join(w for w in words if w))
    if not said:
        return None
    where = f"{last.group(1).rsplit('/', 1)[-1]}, line {last.group(2)}"
    return f"{said} (raised on an executor in {where}; the job's log has the traceback)"


def executor_traceback(exc: BaseException) -> str | None:
    """The executor's Python traceback a failed Spark job carries, for the job's log (its ``error`` keeps only the
    error's words)."""
    java = getattr(exc, "java_exception", None)
    if java is None:
        return None
    text = _java_text(java)
    start = text.find("Traceback (most recent call last)")
    if start < 0:
        return None
    lines = text[start:].splitlines()
    end = next((i for i, line in enumerate(lines) if i and _JAVA_LINE.match(line)), len(lines))
    return "\n".join(lines[:end])[-MAX_MESSAGE:]


_XGBOOST_ERROR = re.compile(r"XGBoostError: (?:\[[\d:]+\] )?(?:\S+:\d+: )?(.+?)(?:\nStack trace:|\n\s*\[bt\]|$)", re.S)
"""xgboost's C++ check, as its Python error ends an executor's traceback:
``XGBoostError: [00:13:40] /workspace/src/objective/regression_obj.cu:119: label must be positive ...`` and a
backtrace."""
