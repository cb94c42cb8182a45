"""What goes wrong talking to the service, one class per way (the CLI maps each to an exit code)."""

from __future__ import annotations

from typing import Any


class SparktrainError(Exception):
    """Anything that went wrong talking to the service."""


class Unreachable(SparktrainError):
    """No answer from the service (connection refused, timeout), or a 502/503/504."""


class Interrupted(SparktrainError):
    """Ctrl-C while following a job: the following stops, the job goes on (the message says how to follow it)."""


class LocalFileError(SparktrainError):
    """A local file or folder that cannot be read or written (the service is not involved)."""


class UsageError(SparktrainError):
    """A setting or argument of the client itself that cannot work (a URL without http:// or https://, a job id
    prefix shorter than 6 characters)."""


class NotTheService(SparktrainError):
    """Something answered at the URL, but not as a sparktrain service does (no JSON)."""


class AmbiguousJobId(SparktrainError):
    """A job id prefix that starts more than one job's id: ``candidates`` are those jobs."""

    def __init__(self, prefix: str, candidates: list[dict[str, Any]]) -> None:
        self.prefix, self.candidates = prefix, candidates
        super().__init__(f"{prefix!r} starts {len(candidates)} job ids; give more of the id")


class ApiError(SparktrainError):
    """The service refused the request: its RFC 9457 problem (``status``, ``detail``, ``errors``, ...)."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status, self.problem = status, problem
        detail = problem.get("detail") or problem.get("title") or f"HTTP {status}"
        super().__init__(f"{status} {problem.get('title', '')}: {detail}".replace("  ", " "))
