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
    without a title takes the status's name, and a detail that only repeats the title is said once. A problem with
    more than one field error (a 422) adds one ``loc: msg`` line for each (at most :attr:`MAX_LINES`), so that a
    notebook's traceback shows them all; :attr:`summary` is the first line alone."""

    MAX_LINES = 20

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status, self.problem = status, problem
        title = str(problem.get("title") or _phrase(status))
        detail = problem.get("detail")
        self.summary = f"{status} {title}" + (f": {detail}" if detail and str(detail) != title else "")
        errors = self.errors
        lines = [f"  {e.get('loc')}: {e.get('msg')}" for e in errors[: self.MAX_LINES]] if len(errors) > 1 else []
        if len(errors) > self.MAX_LINES:
            lines.append(f"  ... and {len(errors) - self.MAX_LINES} more (all of them: .errors)")
        super().__init__("\n".join([self.summary, *lines]))

    @property
    def errors(self) -> list[dict[str, Any]]:
        """The problem's field errors (a 422's ``errors``: each with ``loc``, ``msg``, ``type``); [] if none."""
        errors = self.problem.get("errors")
        return [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []

    @property
    def detail(self) -> str | None:
        """The problem's ``detail``: what went wrong and how to fix it."""
        detail = self.problem.get("detail")
        return None if detail is None else str(detail)

    @property
    def request_id(self) -> str | None:
        """The request's id (also the ``X-Request-ID`` header): the service's logs name it."""
        request_id = self.problem.get("request_id")
        return None if request_id is None else str(request_id)


class JobTimeout(SparktrainError, TimeoutError):
    """``Client.wait(..., timeout=)`` ran out before the job ended: ``job_id`` and the job as last seen (``job``; its
    ``status``). The job goes on."""

    def __init__(self, job_id: str, timeout: float, job: dict[str, Any] | None) -> None:
        self.job_id, self.timeout, self.job = job_id, timeout, job
        status = job.get("status") if job else None
        was = f"it is {status}" if status else "its status is unknown"
        super().__init__(
            f"job {job_id} did not end within {timeout:g} s ({was}); it goes on: wait again, or cancel it "
            f"(Client.cancel({job_id!r}))"
        )


class JobFailed(SparktrainError):
    """``Client.wait(..., raise_on_failure=True)`` saw the job end FAILED or CANCELLED: the finished job (``job``),
    its ``status`` and its error's ``reason`` and ``message`` (None where it has none)."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job
        self.status = str(job.get("status"))
        given = job.get("error")
        error: dict[str, Any] = given if isinstance(given, dict) else {}
        self.reason: str | None = error.get("reason")
        self.message: str | None = error.get("message")
        why = ": ".join(str(part) for part in (self.reason, self.message) if part)
        super().__init__(f"job {job.get('id')} ended {self.status}" + (f": {why}" if why else ""))


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "HTTP error"
