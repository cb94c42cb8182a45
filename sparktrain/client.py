"""A small Python client of the sparktrain HTTP API (httpx), the one the ``sparktrain`` CLI stands on.

It talks HTTP only: nothing of the service is imported, so it installs and runs anywhere that reaches the service.
The service's address and key come from the arguments or from ``SPARKTRAIN_URL`` and ``SPARKTRAIN_API_KEY``.

    with Client() as api:
        job = api.train(json.load(open("examples/xgboost-taxi.json")))
        final = api.wait(job["id"], on_event=print)   # follows GET /jobs/{id}/events until the job ends
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from sparktrain._files import attachment_name, check_folder, make_folder, save
from sparktrain._urls import no_answer, url_problem
from sparktrain.errors import (
    AmbiguousJobId,
    ApiError,
    LocalFileError,
    NotTheService,
    SparktrainError,
    Unreachable,
    UsageError,
)

__all__ = [  # the errors are sparktrain.errors', named here too: callers catch them from the client
    "AmbiguousJobId",
    "ApiError",
    "Client",
    "Event",
    "LocalFileError",
    "ModelRef",
    "NotTheService",
    "SparktrainError",
    "Unreachable",
    "UsageError",
    "parse_events",
]
DEFAULT_URL = "http://127.0.0.1:8000"
ENDED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
_MODEL_REF = re.compile(r"^(?P<name>[^:@]+)(?::(?P<version>\d+)|@(?P<alias>[^:@]+))?$")
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}\Z")
"""A model name as the service takes one (NAME_PATTERN, app/schemas/train.py: nothing of the service is imported)."""
NAME_RULE = "a model name is 1 to 200 letters, digits, '.', '_' or '-', the first a letter or a digit"
_JOB_ID = re.compile(r"^[0-9a-f]{32}$")
"""A job id as the service makes them (``uuid4().hex``): 32 lower-case hex digits."""
_JOB_PREFIX = re.compile(r"^[0-9a-f]{6,31}$")
"""6 to 31 hex digits: never a whole job id, only the start of one (typed short by hand)."""
_SHORT_PREFIX = re.compile(r"^[0-9a-f]{1,5}$")  # the start of an id, too short to look up
PREFIX_SCAN = 10_000
"""How many of the newest jobs a job id prefix is looked for among."""


@dataclass(frozen=True)
class Event:
    """One Server-Sent Event of ``GET /jobs/{id}/events``: ``state``, ``metrics``, ``log`` or ``end``."""

    type: str
    id: str
    data: dict[str, Any]


@dataclass(frozen=True)
class ModelRef:
    """``NAME``, ``NAME:VERSION`` or ``NAME@ALIAS``."""

    name: str
    version: int | None = None
    alias: str | None = None

    @classmethod
    def parse(cls, text: str) -> ModelRef:
        match = _MODEL_REF.match(text.strip())
        if match is None:
            raise ValueError(f"{text!r} is not NAME, NAME:VERSION or NAME@ALIAS")
        version = match.group("version")
        return cls(match.group("name"), int(version) if version else None, match.group("alias"))

    def selector(self) -> dict[str, Any]:
        """The ``model`` member of an evaluate or predict body."""
        out: dict[str, Any] = {"name": self.name}
        if self.version is not None:
            out["version"] = self.version
        if self.alias is not None:
            out["alias"] = self.alias
        return out


def _retry_after_s(response: httpx.Response) -> float:
    try:
        return min(10.0, max(0.25, float(response.headers.get("Retry-After", "1"))))
    except ValueError:
        return 1.0


class Client:
    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        url_from: str | None = None,
        timeout: float = 60.0,
        retry_s: float = 1.0,
        give_up_s: float = 60.0,
    ) -> None:
        """``url_from``: where the URL comes from, for the messages of one that cannot work or does not answer
        (``--url``); ``retry_s``: the pause before an event stream reconnects; ``give_up_s``: how long it keeps
        trying."""
        given = url or os.environ.get("SPARKTRAIN_URL") or DEFAULT_URL
        if url_from is None:
            url_from = "the url argument" if url else "SPARKTRAIN_URL" if given != DEFAULT_URL else "the default URL"
        self.url_from = url_from
        problem = url_problem(given)  # spaces around the URL are not part of it
        if problem is not None:
            raise UsageError(f"the service's URL {given!r} (from {self.url_from}) {problem}")
        self.url = given.strip().rstrip("/")
        key = api_key if api_key is not None else os.environ.get("SPARKTRAIN_API_KEY", "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        except httpx.InvalidURL as exc:  # what url_problem does not catch
            raise UsageError(f"the service's URL {given!r} (from {self.url_from}) is not a URL: {exc}") from exc
        self.retry_s, self.give_up_s = retry_s, give_up_s

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- plumbing ---------------------------------------------------------------------------------------------

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request; a read over the key's request rate (429) waits for ``Retry-After`` (at most 10 s) and asks
        again, up to three times. A submit or a cancel is not repeated: its 429 is the caller's to see."""
        for tries in range(4):
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                raise Unreachable(self._no_answer(exc)) from exc
            if response.status_code != 429 or method != "GET" or tries == 3:
                break
            time.sleep(_retry_after_s(response))
        _raise_for(response)
        return response

    def _no_answer(self, exc: Exception) -> str:
        return no_answer(self.url, str(exc) or type(exc).__name__, self.url_from)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise NotTheService(_not_the_service(self.url, response)) from None

    # --- jobs -------------------------------------------------------------------------------------------------

    def submit(self, path: str, body: dict[str, Any], *, idempotency_key: str | None = None) -> dict[str, Any]:
        """POST a job body to ``/train``, ``/tune``, ``/evaluate`` or ``/predict`` (a batch one): the queued job."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return dict(self._json("POST", path, json=body, headers=headers))

    def train(self, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self.submit("/train", body, **kwargs)

    def tune(self, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """A hyperparameter search: ``name``, ``base`` (a POST /train body) and ``space`` (docs/tuning.md)."""
        return self.submit("/tune", body, **kwargs)

    def evaluate(self, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self.submit("/evaluate", body, **kwargs)

    def predict(self, body: dict[str, Any]) -> dict[str, Any]:
        """Inline rows: the predictions (200). A body with a ``dataset``: the batch job (202)."""
        return dict(self._json("POST", "/predict", json=body))

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self._json("GET", f"/jobs/{job_id}"))

    def jobs(
        self, *, status: str | None = None, type: str | None = None, name: str | None = None, limit: int = 50
    ) -> list[dict[str, Any]]:
        return self.jobs_page(status=status, type=type, name=name, limit=limit)[0]

    def jobs_page(
        self,
        *,
        status: str | None = None,
        type: str | None = None,
        name: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of ``GET /jobs``, newest first, and the cursor of the next page (None after the last).
        ``name``: the jobs whose name or model name contains it, in any case."""
        given = {"status": status, "type": type, "name": name, "limit": limit, "cursor": cursor}
        page = self._json("GET", "/jobs", params={k: v for k, v in given.items() if v is not None})
        return list(page["items"]), page.get("next_cursor")

    def find_jobs(self, prefix: str, *, scan: int = PREFIX_SCAN) -> list[dict[str, Any]]:
        """The jobs whose id starts with ``prefix``, among the newest ``scan`` (paged through ``GET /jobs``)."""
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        seen = 0
        while seen < scan:
            items, cursor = self.jobs_page(limit=min(500, scan - seen), cursor=cursor)
            found += [job for job in items if str(job["id"]).startswith(prefix)]
            seen += len(items)
            if cursor is None or not items:
                break
        return found

    def job_id(self, text: str) -> str:
        """The id of the job that ``text`` names: the id itself, or a unique prefix of one (6 or more of its hex
        digits, any case). A whole id, or text that is neither an id nor a prefix, is returned without a request:
        the caller's own request for it is the one the service answers (its 404 for an unknown job). A prefix is
        looked for in the job list (``GET /jobs/{prefix}`` would only 404: ids are 32 digits); one that starts
        several ids raises :class:`AmbiguousJobId`, one that starts none an :class:`ApiError` 404, and 1 to 5 hex
        digits a :class:`UsageError` (too short to look up)."""
        lowered = text.lower()
        if _JOB_ID.match(lowered):
            return lowered
        if _SHORT_PREFIX.match(lowered):
            raise UsageError(f"{text!r} is too short: give at least 6 characters of the id, or the whole id")
        if not _JOB_PREFIX.match(lowered):
            return text
        matches = self.find_jobs(lowered)
        if not matches:
            detail = f"no job id starts with {text!r} (among the newest {PREFIX_SCAN} jobs)"
            raise ApiError(404, {"title": "Not Found", "status": 404, "detail": detail})
        if len(matches) > 1:
            raise AmbiguousJobId(text, matches)
        return str(matches[0]["id"])

    def cancel(self, job_id: str) -> dict[str, Any]:
        return dict(self._json("POST", f"/jobs/{job_id}/cancel"))

    def metrics(self, job_id: str, *, key: str | None = None) -> list[dict[str, Any]]:
        params = {"key": key} if key else {}
        return list(self._json("GET", f"/jobs/{job_id}/metrics", params=params)["metrics"])

    def logs(self, job_id: str, *, after: int | None = None) -> list[dict[str, Any]]:
        """One page of the job's log lines: the newest (at most 200), or those after line id ``after``."""
        params = {"after": after} if after is not None else {}
        return list(self._json("GET", f"/jobs/{job_id}/logs", params=params)["lines"])

    def all_logs(self, job_id: str) -> Iterator[dict[str, Any]]:
        """Every log line of the job so far, oldest first, page by page."""
        after = 0
        while lines := self.logs(job_id, after=after):
            yield from lines
            after = lines[-1]["id"]

    def events(self, job_id: str, *, path: str | None = None) -> Iterator[Event]:
        """The job's events until ``end``; a dropped connection is resumed with ``Last-Event-ID`` (no event is
        lost or repeated)."""
        last_id = ""
        failing_since: float | None = None
        while True:
            headers = {"Accept": "text/event-stream", **({"Last-Event-ID": last_id} if last_id else {})}
            try:
                with self._http.stream(
                    "GET", path or f"/jobs/{job_id}/events", headers=headers, timeout=httpx.Timeout(60, read=None)
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        _raise_for(response)
                    for event in parse_events(response.iter_lines()):
                        failing_since = None
                        last_id = event.id or last_id
                        yield event
                        if event.type == "end":
                            return
            except (httpx.TransportError, Unreachable) as exc:
                if not last_id and failing_since is None and isinstance(exc, httpx.ConnectError):
                    raise Unreachable(self._no_answer(exc)) from exc  # never reached: no waiting
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > self.give_up_s:
                    raise Unreachable(f"lost {self.url} for {self.give_up_s:.0f} s: {exc}") from exc
            time.sleep(self.retry_s)

    def follow_logs(self, job_id: str, *, after: int | None = None) -> Iterator[dict[str, Any]]:
        """Log lines as they are written, until the job ends (``GET /jobs/{id}/logs?follow=true``)."""
        query = f"?follow=true&after={after}" if after is not None else "?follow=true"
        for event in self.events(job_id, path=f"/jobs/{job_id}/logs{query}"):
            if event.type == "log":
                yield from event.data["lines"]

    def wait(self, job_id: str, *, on_event: Callable[[Event], None] | None = None) -> dict[str, Any]:
        """Follow the job until it ends; returns the finished job."""
        for event in self.events(job_id):
            if on_event is not None:
                on_event(event)
        return self.job(job_id)

    # --- models -----------------------------------------------------------------------------------------------

    def models(self) -> list[dict[str, Any]]:
        return list(self._json("GET", "/models", params={"limit": 1000})["items"])

    def resolve(self, ref: ModelRef, *, again: bool = True) -> int:
        """The version number a reference names: itself, an alias's target, or the newest version. A name without
        a version is refused as the service refuses it for a prediction (a 409 while its first training job runs, a
        404 that suggests the name meant); one registered in between is asked for again (``again``: once). A name
        no model can have (``foo/bar``) is a :class:`UsageError` that gives the service's rule, before any
        request."""
        if not _MODEL_NAME.match(ref.name):
            raise UsageError(f"no model is named {ref.name!r}: {NAME_RULE}")
        if ref.version is not None:
            return ref.version
        name = quote(ref.name, safe="")
        try:
            model: dict[str, Any] | None = self._json("GET", f"/models/{name}")
        except ApiError as exc:
            if exc.status != 404:
                raise
            model = None
        if model is not None and ref.alias is not None:
            if ref.alias in model["aliases"]:
                return int(model["aliases"][ref.alias])
            known = ", ".join(model["aliases"]) or "none"
            detail = f"Model {ref.name!r} has no alias {ref.alias!r} (aliases: {known})."
            raise ApiError(404, {"title": "Not Found", "status": 404, "detail": detail})
        if model is not None and model["latest_version"] is not None:
            return int(model["latest_version"])
        self.request("GET", f"/v2/models/{name}/ready")  # the service's own why: resolved as a prediction's model
        if again:  # ready after all: a version was registered since /models/{name} was asked
            return self.resolve(ref, again=False)
        detail = f"Model {ref.name!r} has no version yet; ask again (one was registered just now)."
        raise ApiError(404, {"title": "Not Found", "status": 404, "detail": detail})

    def signature(self, ref: ModelRef) -> dict[str, Any]:
        """What a model version takes and answers: ``{"inputs": [...], "outputs": [...], ...}`` (empty lists for a
        version without one)."""
        version = self._json("GET", f"/models/{ref.name}/versions/{self.resolve(ref)}")
        return dict(version.get("signature") or {"inputs": [], "outputs": []})

    def download(self, ref: ModelRef, dest: str | os.PathLike[str] | None = None) -> Path:
        """Save a model version's archive (``.tar.gz``); returns its path.

        ``dest`` is a file, or a folder when it ends with a slash or is one already: a folder ending with a slash
        is created (with its parents), a file's folder must be there already (:class:`LocalFileError` before any
        request, nothing created), and a file in a folder is named as the service names it
        (``Content-Disposition``, ``NAME-vN.tar.gz``). None is the current folder; ``-`` is refused (not stdout)."""
        text = os.fspath(dest) if dest is not None else ""
        if text == "-":
            raise LocalFileError(
                "-o -: the archive is not written to stdout; give a file or a folder (a file named -: ./-)"
            )
        into = not text or text.endswith(("/", os.sep)) or Path(text).is_dir()
        if not into:
            check_folder(Path(text).parent)
        version = self.resolve(ref)
        path = f"/models/{ref.name}/versions/{version}/artifact"
        try:
            with self._http.stream("GET", path) as response:
                if response.status_code >= 400:
                    response.read()
                    _raise_for(response)
                if into:
                    name = attachment_name(response) or f"{ref.name}-v{version}.tar.gz"
                    target = Path(text or ".") / name
                else:
                    target = Path(text)
                make_folder(target.parent)
                save(response, target)
        except httpx.TransportError as exc:
            raise Unreachable(self._no_answer(exc)) from exc
        return target


def parse_events(lines: Iterator[str]) -> Iterator[Event]:
    """Server-Sent Events from the lines of a ``text/event-stream`` body (comments skipped)."""
    kind, event_id, data = "message", "", list[str]()
    for line in lines:
        if not line:
            if data:
                yield Event(kind, event_id, json.loads("\n".join(data)))
            kind, event_id, data = "message", "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            kind = value
        elif field == "id":
            event_id = value
        elif field == "data":
            data.append(value)


def _raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        problem = response.json()
    except ValueError:
        if response.status_code not in (502, 503, 504):
            raise NotTheService(_not_the_service(str(response.request.url), response)) from None
        problem = {"title": response.reason_phrase, "detail": response.text[:200]}
    if not isinstance(problem, dict):
        problem = {"detail": str(problem)}
    if response.status_code in (502, 503, 504):
        raise Unreachable(f"{response.status_code}: {problem.get('detail') or response.reason_phrase}")
    raise ApiError(response.status_code, problem)


def _not_the_service(url: str, response: httpx.Response) -> str:
    kind = response.headers.get("content-type", "no content type").split(";")[0]
    return (
        f"{url} answered {response.status_code} with {kind}, not as a sparktrain service does: check --url or "
        "SPARKTRAIN_URL"
    )
