"""What goes wrong talking to the service, one class per way (the CLI maps each to an exit code)."""

from __future__ import annotations

from http import HTTPStatus
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
    """The service refused the request (4xx), or failed (a 5xx other than 502/503/504): its RFC 9457 problem
    (``status``, ``title``, ``detail``, ``errors``, ``request_id``, ...). Said as ``404 Not found: detail``; a problem
    without a title takes the status's name, and a detail that only repeats the title is said once."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status, self.problem = status, problem
        title = str(problem.get("title") or _phrase(status))
        detail = problem.get("detail")
        said = f"{status} {title}" + (f": {detail}" if detail and str(detail) != title else "")
        super().__init__(said)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "HTTP error"
