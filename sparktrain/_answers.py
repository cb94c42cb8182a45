"""An HTTP answer read as the client reads it: what a failed one raises (a refusal, the service failing, the
service unavailable, something that is not the service) and how long a 429 asks to wait."""

from __future__ import annotations

import httpx

from sparktrain._urls import masked
from sparktrain.errors import ApiError, NotTheService, Unreachable


def retry_after_s(response: httpx.Response) -> float:
    try:
        return min(10.0, max(0.25, float(response.headers.get("Retry-After", "1"))))
    except ValueError:
        return 1.0


def header_problem(value: str) -> str | None:
    """What in ``value`` an HTTP header cannot carry, without showing it (a key is a secret); None: nothing."""
    for i, char in enumerate(value):
        if not " " <= char <= "~":
            kind = "a control character" if char.isascii() else "a character that is not ASCII"
            return f"holds {kind} (character {i + 1} of {len(value)})"
    return None


def raise_for(response: httpx.Response) -> None:
    """A 4xx: :class:`ApiError` (exit 2); a 502/503/504: :class:`Unreachable`; another 5xx: :class:`ApiError`, the
    service's failure (exit 5), JSON or not. Another 4xx without JSON is something that is not the service."""
    status = response.status_code
    if status < 400:
        return
    try:
        problem = response.json()
    except ValueError:
        if status < 500:
            raise NotTheService(not_the_service(str(response.request.url), response)) from None
        plain = response.headers.get("content-type", "").startswith("text/plain")
        problem = {"title": response.reason_phrase, "detail": response.text[:200] if plain else None}
    if not isinstance(problem, dict):
        problem = {"detail": str(problem)}
    if status in (502, 503, 504):
        said = problem.get("detail") or problem.get("title") or response.reason_phrase
        raise Unreachable(f"{masked(str(response.request.url))} answered {status}: {said}")
    raise ApiError(status, problem)


def not_the_service(url: str, response: httpx.Response) -> str:
    kind = response.headers.get("content-type", "no content type").split(";")[0]
    return (
        f"{masked(url)} answered {response.status_code} with {kind}, not as a sparktrain service does: check --url or "
        "SPARKTRAIN_URL"
    )
