"""A small Python client of the sparktrain HTTP API (httpx), the one the ``sparktrain`` CLI stands on, and the one
to use from a notebook (docs/python.md).

It talks HTTP only: nothing of the service is imported, so it installs and runs anywhere that reaches the service.
The service's address and key come from the arguments or from ``SPARKTRAIN_URL`` and ``SPARKTRAIN_API_KEY``.

    with Client() as api:
        job = api.train(json.load(open("examples/xgboost-taxi.json")))
        final = api.wait(job["id"], on_event=print)   # follows GET /jobs/{id}/events until the job ends
        api.predict("taxi-fare", df)                   # a pandas DataFrame, a numpy array or a list of rows

Every answer is the service's JSON as dicts and lists (``pd.DataFrame(api.metrics(job_id))`` makes a table of it);
what the client has no method for is :meth:`Client.request`. What goes wrong is raised as :mod:`sparktrain.errors`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from sparktrain import _shapes as shapes
from sparktrain._answers import header_problem, not_the_service, raise_for, retry_after_s
from sparktrain._files import attachment_name, check_folder, make_folder, save
from sparktrain._refs import MODEL_NAME, NAME_RULE, Event, ModelRef, parse_events
from sparktrain._rows import not_json, rows_member
from sparktrain._urls import masked, no_answer, url_problem
from sparktrain.errors import (
    AmbiguousJobId,
    ApiError,
    JobFailed,
    JobTimeout,
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
    "JobFailed",
    "JobTimeout",
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
FAILED_OR_CANCELLED = frozenset({"FAILED", "CANCELLED"})  # wait(raise_on_failure=True) raises for these
_JOB_ID = re.compile(r"^[0-9a-f]{32}$")
"""A job id as the service makes them (``uuid4().hex``): 32 lower-case hex digits."""
_JOB_PREFIX = re.compile(r"^[0-9a-f]{6,31}$")
"""6 to 31 hex digits: never a whole job id, only the start of one (typed short by hand)."""
_SHORT_PREFIX = re.compile(r"^[0-9a-f]{1,5}$")  # the start of an id, too short to look up
PREFIX_SCAN = 10_000
"""How many of the newest jobs a job id prefix is looked for among."""


class _Expired(Exception):
    """``wait``'s timeout ran out while it followed the job's events."""


class Client:
    """The sparktrain service over HTTP: submit and follow jobs, read their metrics and logs, predict, and manage the
    registry (models, versions, aliases, tags, datasets). Use it as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        url_from: str | None = None,
        key_from: str | None = None,
        timeout: float = 60.0,
        retry_s: float = 1.0,
        give_up_s: float = 60.0,
    ) -> None:
        """A client of the service at ``url``.

        ``url``: the service's address (``http://host:8000``); None takes ``SPARKTRAIN_URL``, else
        ``http://127.0.0.1:8000``. ``api_key``: the API key, sent as ``Authorization: Bearer``; None takes
        ``SPARKTRAIN_API_KEY``, else no key (a service without keys). ``timeout``: seconds one request may take
        (following a job's events waits as long as the job runs). ``url_from``: where the URL comes from, for the
        messages of one that cannot work or does not answer (``--url``); ``key_from``: the same for the API key
        (spaces and line breaks around it are not part of it, and one holding a character a header cannot carry is
        a :class:`UsageError` that never shows it); ``retry_s``: the pause before an event stream reconnects;
        ``give_up_s``: how long it keeps trying."""
        given = url or os.environ.get("SPARKTRAIN_URL") or DEFAULT_URL
        if url_from is None:
            url_from = "the url argument" if url else "SPARKTRAIN_URL" if given != DEFAULT_URL else "the default URL"
        self.url_from = url_from
        problem = url_problem(given)  # spaces around the URL are not part of it
        if problem is not None:
            raise UsageError(f"the service's URL {masked(given)!r} (from {self.url_from}) {problem}")
        self.url = given.strip().rstrip("/")
        if key_from is None:
            key_from = "the api_key argument" if api_key is not None else "SPARKTRAIN_API_KEY"
        self._key = (api_key if api_key is not None else os.environ.get("SPARKTRAIN_API_KEY", "")).strip()
        if (bad := header_problem(self._key)) is not None:
            raise UsageError(f"the API key (from {key_from}) {bad}, which an HTTP header cannot carry (the key itself "
                             "is not shown)")  # fmt: skip
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        try:
            self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        except httpx.InvalidURL as exc:  # what url_problem does not catch
            raise UsageError(
                f"the service's URL {masked(given)!r} (from {self.url_from}) is not a URL: {exc}"
            ) from None
        self.retry_s, self.give_up_s = retry_s, give_up_s

    def __repr__(self) -> str:
        return f"Client({masked(self.url)!r}, api_key={'set' if self._key else 'not set'})"  # never the key

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections (a ``with Client() as api:`` block does it at its end)."""
        self._http.close()

    # --- plumbing ---------------------------------------------------------------------------------------------

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, the escape hatch for what the client has no method for: ``path`` is relative to the URL
        (``/jobs/ID/checkpoints``) and ``kwargs`` go to httpx (``json=``, ``params=``, ``headers=``); the key is
        sent. Returns the ``httpx.Response`` (``.json()``); a refusal is an :class:`ApiError`, as for every method.
        A read over the key's request rate (429) waits for ``Retry-After`` (at most 10 s) and asks again, up to
        three times. A submit or a cancel is not repeated: its 429 is the caller's to see. A ``json=`` body that
        JSON cannot carry (a DataFrame, a numpy array) is a :class:`UsageError` that says what to give instead."""
        for tries in range(4):
            try:
                response = self._http.request(method, path, **kwargs)
            except TypeError as exc:  # json.dumps's: a value (or a key) JSON cannot carry
                if "json" not in kwargs or not ("JSON serializable" in str(exc) or "keys must be" in str(exc)):
                    raise
                raise not_json(exc) from None
            except (httpx.TransportError, ValueError) as exc:
                raise self._not_sent(exc) from None
            if response.status_code != 429 or method != "GET" or tries == 3:
                break
            time.sleep(retry_after_s(response))
        raise_for(response)
        return response

    def _no_answer(self, exc: Exception) -> str:
        return no_answer(self.url, self._redacted(str(exc) or type(exc).__name__), self.url_from)

    def _redacted(self, text: str) -> str:
        """``text`` without the API key (an httpx message may quote a header) or the URL's password."""
        text = text.replace(self.url, masked(self.url))
        return text.replace(self._key, "***") if len(self._key) > 3 else text

    def _not_sent(self, exc: Exception) -> SparktrainError:
        """A request that failed: unreachable when no answer came, a :class:`UsageError` when this client could not
        make it (a header or a body it cannot send: the service is not to blame)."""
        if isinstance(exc, UnicodeEncodeError):
            return UsageError("the request was not sent: a header holds a character that is not ASCII")
        if isinstance(exc, httpx.LocalProtocolError | httpx.UnsupportedProtocol):
            return UsageError(f"the request was not sent: {self._redacted(str(exc))}")
        if isinstance(exc, ValueError):  # json= with NaN or Infinity: json.dumps(allow_nan=False)'s
            return UsageError(
                f"the request was not sent: its body is not JSON ({exc}): it holds NaN or Infinity, which JSON has no "
                "number for; give None for a missing value (predict(model, rows) sends NaN as null) and a finite "
                "number for an infinite one"
            )
        return Unreachable(self._no_answer(exc))

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise NotTheService(not_the_service(self.url, response)) from None

    def _shaped(
        self, method: str, path: str, fields: dict[str, Any], *, optional: dict[str, Any] | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """An answer that is an object with ``fields`` (a job's ``id`` and ``status``, ...) and, where present, the
        ``optional`` ones; else it is not the service that answered."""
        return dict(self._check(path, shapes.checked, self._json(method, path, **kwargs), fields, optional))

    def _check(self, path: str, check: Callable[..., Any], *args: Any) -> Any:
        try:
            return check(*args)
        except shapes.WrongShape as exc:
            said = f"{masked(self.url)}{path} answered JSON of another shape ({exc}), not as a sparktrain service does"
            raise NotTheService(f"{said}: check --url or SPARKTRAIN_URL") from None

    def _pages(
        self, path: str, key: str, fields: dict[str, Any], params: dict[str, Any], limit: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every item of a paged list (``{key: [...], "next_cursor": ...}``), following ``next_cursor`` (``cursor``)
        until a page has none; ``limit``: at most that many."""
        cursor: str | None = None
        seen: set[str] = set()
        count = 0
        while True:
            answer = self._json("GET", path, params={**params, **({"cursor": cursor} if cursor else {})})
            items, cursor = self._check(path, shapes.items, answer, key, fields)
            for item in items[: None if limit is None else limit - count]:
                count += 1
                yield item
            if cursor is None or not items or (limit is not None and count >= limit):
                return
            if cursor in seen:  # a service never gives a cursor twice: this would never end
                self._check(path, shapes.wrong, "a next_cursor it gave before")
            seen.add(cursor)

    # --- jobs -------------------------------------------------------------------------------------------------

    def submit(self, path: str, body: dict[str, Any], *, idempotency_key: str | None = None) -> dict[str, Any]:
        """POST a job body to ``/train``, ``/tune``, ``/evaluate`` or ``/predict`` (a batch one): the queued job."""
        if idempotency_key is not None and (bad := header_problem(idempotency_key.strip())) is not None:
            raise UsageError(f"the idempotency key {bad}, which an HTTP header cannot carry")
        headers = {"Idempotency-Key": idempotency_key.strip()} if idempotency_key else {}
        return self._shaped("POST", path, shapes.JOB, json=body, headers=headers, optional=shapes.JOB_OPTIONAL)

    def train(self, body: dict[str, Any], *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Queue a training job (``POST /train``; the body's fields: README.md, docs/torch-trainer.md,
        docs/xgboost.md, docs/spark-ml.md): the job, ``{"id", "status": "QUEUED", ...}``; follow it with
        :meth:`wait`. ``idempotency_key``: sent as ``Idempotency-Key``, so that sending the same body again with it
        answers the first job instead of queueing a second."""
        return self.submit("/train", body, idempotency_key=idempotency_key)

    def tune(self, body: dict[str, Any], *, idempotency_key: str | None = None) -> dict[str, Any]:
        """A hyperparameter search: ``name``, ``base`` (a POST /train body) and ``space`` (docs/tuning.md). The job;
        once it ended, ``job(id)["result"]["leaderboard"]`` ranks its trials."""
        return self.submit("/tune", body, idempotency_key=idempotency_key)

    def evaluate(self, body: dict[str, Any], *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Queue an evaluation of a model version on a dataset (``POST /evaluate``, docs/inference.md): the job; its
        ``result`` holds the metrics once it ended."""
        return self.submit("/evaluate", body, idempotency_key=idempotency_key)

    def predict(
        self,
        model: dict[str, Any] | ModelRef | str | None = None,
        rows: Any = None,
        *,
        body: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Predictions: ``{"predictions": [...]}`` (and ``probabilities`` for a classifier).

        ``predict(model, rows)``: ``model`` is ``"NAME"`` (its newest version), ``"NAME:3"``, ``"NAME@ALIAS"`` or a
        :class:`ModelRef`; ``rows`` a pandas DataFrame (sent as ``dataframe_split``), a numpy array (``instances``,
        in the model's feature order), a list of objects (``{column: value}``), a list of lists or an object of
        columns (``{column: [values]}``, as ``inputs``); the columns are those of :meth:`signature` (another is
        refused). Every float goes exactly (all its digits); NaN, NaT and None go as null, timestamps and dates as
        ISO text (to the microsecond), numpy arrays and numbers as lists and numbers; an infinite value is a
        :class:`UsageError`. ``predict(body)`` (or ``predict(body=...)``): a whole ``POST /predict`` body
        (docs/inference.md), sent as it is: inline rows answer the predictions (200); a body with a ``dataset``
        queues a batch job and answers the job (202)."""
        if body is not None:
            if model is not None or rows is not None:
                raise UsageError(
                    "predict(body=...) takes nothing else: give predict(body=body) or predict(model, rows)"
                )
            model = body
        if isinstance(model, dict):
            if rows is not None:
                raise UsageError("predict(body) takes no rows: give predict(body) or predict(model, rows)")
            sent = model
        else:
            if model is None:
                raise UsageError("predict() needs a model and rows: predict(model, df), or a whole body: predict(body)")
            if rows is None:
                raise UsageError(f"predict({model!r}) needs rows: predict(model, df), or a whole body: predict(body)")
            sent = {"model": self._ref(model).selector(), **rows_member(rows)}
        fields = shapes.JOB if "dataset" in sent else {"predictions": list}
        return self._shaped("POST", "/predict", fields, json=sent)

    def job(self, job_id: str) -> dict[str, Any]:
        """One job (``GET /jobs/{id}``): ``status`` (``QUEUED``, ``RUNNING``, ``SUCCEEDED``, ``FAILED``,
        ``CANCELLED``), ``progress``, ``result``, ``model``, ``error`` (``reason``, ``message``), ``warnings``."""
        return self._shaped("GET", f"/jobs/{job_id}", shapes.JOB, optional=shapes.JOB_OPTIONAL)

    def jobs(
        self,
        *,
        status: str | None = None,
        type: str | None = None,
        name: str | None = None,
        limit: int = 50,
        parent_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """The newest ``limit`` jobs (one page of ``GET /jobs``), of a ``status``, a ``type`` (``train``, ``tune``,
        ``evaluate``, ``predict``), a ``name`` (contained in the job's or its model's name) and a ``parent_id`` (a
        tune job's id: its trials) when given; every one of them: :meth:`all_jobs`."""
        return self.jobs_page(status=status, type=type, name=name, limit=limit, parent_id=parent_id)[0]

    def jobs_page(
        self,
        *,
        status: str | None = None,
        type: str | None = None,
        name: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        parent_id: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of ``GET /jobs``, newest first, and the cursor of the next page (None after the last).
        ``name``: the jobs whose name or model name contains it, in any case; ``parent_id``: a tune job's trials."""
        given = {"status": status, "type": type, "name": name, "limit": limit, "cursor": cursor, "parent_id": parent_id}
        page = self._json("GET", "/jobs", params={k: v for k, v in given.items() if v is not None})
        items, next_cursor = self._check("/jobs", shapes.items, page, "items", shapes.LISTED_JOB, shapes.JOB_OPTIONAL)
        return items, next_cursor

    def all_jobs(
        self,
        *,
        status: str | None = None,
        type: str | None = None,
        name: str | None = None,
        page_size: int = 500,
        parent_id: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Every job (of the filters, as :meth:`jobs` takes them), newest first, page by page (``next_cursor``)
        until the last."""
        given = {"status": status, "type": type, "name": name, "limit": page_size, "parent_id": parent_id}
        yield from self._pages("/jobs", "items", shapes.LISTED_JOB, {k: v for k, v in given.items() if v is not None})

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
            raise ApiError(404, {"title": "Not found", "status": 404, "detail": detail})
        if len(matches) > 1:
            raise AmbiguousJobId(text, matches)
        return str(matches[0]["id"])

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Ask the job to stop (``POST /jobs/{id}/cancel``; asking again is harmless): the job as it is then; a
        running one ends ``CANCELLED`` once its tasks stop (:meth:`wait` sees it end). One that has ended already
        is an :class:`ApiError` 409."""
        return self._shaped("POST", f"/jobs/{job_id}/cancel", shapes.JOB, optional=shapes.JOB_OPTIONAL)

    def metrics(self, job_id: str, *, key: str | None = None, page_size: int | None = None) -> list[dict[str, Any]]:
        """Every metric point of the job so far (``key``: of that key only), in step order, page by page (of
        ``page_size`` points; None: the service's default)."""
        given = {"key": key or None, "limit": page_size}
        params = {k: v for k, v in given.items() if v is not None}
        return list(self._pages(f"/jobs/{job_id}/metrics", "metrics", shapes.METRIC, params))

    def logs(self, job_id: str, *, after: int | None = None) -> list[dict[str, Any]]:
        """One page of the job's log lines: the newest (at most 200), or those after line id ``after``."""
        params = {"after": after} if after is not None else {}
        path = f"/jobs/{job_id}/logs"
        return list(
            self._check(path, shapes.items, self._json("GET", path, params=params), "lines", shapes.LOG_LINE)[0]
        )

    def all_logs(self, job_id: str) -> Iterator[dict[str, Any]]:
        """Every log line of the job so far, oldest first, page by page."""
        after = 0
        while lines := self.logs(job_id, after=after):
            yield from lines
            after = lines[-1]["id"]

    def events(self, job_id: str, *, path: str | None = None) -> Iterator[Event]:
        """The job's events until ``end`` (``GET /jobs/{id}/events``: ``state``, ``metrics``, ``log``, ``end``; each
        an :class:`Event` with ``type`` and ``data``); a dropped connection is resumed with ``Last-Event-ID`` (no
        event is lost or repeated)."""
        return self._events(job_id, path=path)

    def _events(self, job_id: str, *, path: str | None = None, deadline: float | None = None) -> Iterator[Event]:
        """:meth:`events`; past ``deadline`` (``time.monotonic()``) :class:`_Expired` is raised, within one of the
        stream's 15 s pings (or reads, when no ping comes)."""
        last_id = ""
        failing_since: float | None = None
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                raise _Expired
            headers = {"Accept": "text/event-stream", **({"Last-Event-ID": last_id} if last_id else {})}
            read = None if deadline is None else max(0.1, deadline - time.monotonic())
            try:
                with self._http.stream(
                    "GET", path or f"/jobs/{job_id}/events", headers=headers, timeout=httpx.Timeout(60, read=read)
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise_for(response)
                    for event in parse_events(_until(response.iter_lines(), deadline)):
                        failing_since = None
                        last_id = event.id or last_id
                        yield event
                        if event.type == "end":
                            return
            except (httpx.TransportError, Unreachable) as exc:
                if isinstance(exc, httpx.LocalProtocolError | httpx.UnsupportedProtocol):  # this client's own
                    raise self._not_sent(exc) from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise _Expired from None
                if not last_id and failing_since is None and isinstance(exc, httpx.ConnectError):
                    raise Unreachable(self._no_answer(exc)) from exc  # never reached: no waiting
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > self.give_up_s:
                    said = self._redacted(str(exc))
                    raise Unreachable(f"lost {masked(self.url)} for {self.give_up_s:.0f} s: {said}") from exc
            time.sleep(self.retry_s)

    def follow_logs(self, job_id: str, *, after: int | None = None) -> Iterator[dict[str, Any]]:
        """Log lines as they are written, until the job ends (``GET /jobs/{id}/logs?follow=true``)."""
        query = f"?follow=true&after={after}" if after is not None else "?follow=true"
        for event in self.events(job_id, path=f"/jobs/{job_id}/logs{query}"):
            if event.type == "log":
                yield from event.data["lines"]

    def wait(
        self,
        job_id: str,
        *,
        on_event: Callable[[Event], None] | None = None,
        timeout: float | None = None,
        raise_on_failure: bool = False,
    ) -> dict[str, Any]:
        """Follow the job until it ends; returns the finished job (:meth:`job`), whatever its status.

        ``on_event``: called with each :class:`Event` as it comes (``state`` events carry ``progress`` and
        ``message``: a progress bar's). ``timeout``: seconds to wait at most (None: as long as the job runs); past
        it :class:`JobTimeout` (a ``TimeoutError``) names the job and its last status, and the job goes on; a job
        that has ended by then is returned however short the timeout (``timeout=0`` too).
        ``raise_on_failure``: a job that ends ``FAILED`` or ``CANCELLED`` raises :class:`JobFailed` with its
        ``reason`` and ``message`` instead of being returned."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            for event in self._events(job_id, deadline=deadline):
                if on_event is not None:
                    on_event(event)
        except _Expired:
            try:
                last: dict[str, Any] | None = self.job(job_id)
            except SparktrainError:
                last = None
            if last is None or last["status"] not in ENDED:
                raise JobTimeout(job_id, float(timeout or 0), last) from None
            final = last  # it had ended already: the timeout was shorter than one look at it
        else:
            final = self.job(job_id)
        if raise_on_failure and final["status"] in FAILED_OR_CANCELLED:
            raise JobFailed(final)
        return final

    def checkpoints(self, job_id: str) -> list[dict[str, Any]]:
        """The checkpoints a training job wrote (``GET /jobs/{id}/checkpoints``): ``id``, ``epoch``, ``step``,
        ``uri``, ``metrics``, ``created_at``; a checkpoint's id resumes a job (``training.resume_from``)."""
        path = f"/jobs/{job_id}/checkpoints"
        return list(self._check(path, shapes.items, self._json("GET", path), "checkpoints", {"id": str})[0])

    # --- models -----------------------------------------------------------------------------------------------

    def models(self, *, page_size: int = 1000) -> list[dict[str, Any]]:
        """Every registered model by name, page by page (``next_cursor``, when the service pages them)."""
        found = list(self._pages("/models", "items", shapes.MODEL, {"limit": page_size}))
        for model in found:
            if not all(isinstance(v, dict) for v in model["versions"]):
                self._check("/models", shapes.wrong, "a model whose versions are not objects")
        return found

    def model(self, name: str) -> dict[str, Any]:
        """One registered model (``GET /models/{name}``): ``versions``, ``latest_version``, ``aliases``
        (``{alias: version}``), ``tags``."""
        return self._shaped("GET", f"/models/{self._model_name(name)}", shapes.MODEL, optional=shapes.MODEL_OPTIONAL)

    def version(self, name: str, version: int) -> dict[str, Any]:
        """One model version (``GET /models/{name}/versions/{v}``): ``framework``, ``metrics``, ``params``,
        ``signature``, ``job_id``, ``formats`` (what :meth:`download` can give), ``tags``."""
        return self._shaped("GET", self._version_path(name, version), {"version": int})

    def delete_model(self, name: str) -> None:
        """Delete a model with every version, alias and tag (``DELETE /models/{name}``); a job that still uses it
        makes the service refuse (:class:`ApiError` 409)."""
        self.request("DELETE", f"/models/{self._model_name(name)}")

    def delete_version(self, name: str, version: int) -> None:
        """Delete one version, its aliases and tags (its number is never given again); 409 while a job uses it."""
        self.request("DELETE", self._version_path(name, version))

    def tag(self, name: str, key: str, value: str, *, version: int | None = None) -> dict[str, Any]:
        """Set a tag on the model ``name``, or on its ``version``: created, or its value replaced; the service's
        answer (``{"name", "key", "value"}``, and ``version``)."""
        return self._shaped("PUT", self._tag_path(name, key, version), {"key": str}, json={"value": value})

    def untag(self, name: str, key: str, *, version: int | None = None) -> None:
        """Remove a tag from the model ``name``, or from its ``version``; one it does not have is a 404."""
        self.request("DELETE", self._tag_path(name, key, version))

    def alias(self, name: str, alias: str) -> dict[str, Any]:
        """The version that ``alias`` of the model ``name`` names (``GET /models/{name}/aliases/{alias}``), as
        :meth:`version` answers it; an alias the model does not have is a 404."""
        return self._shaped("GET", f"/models/{self._model_name(name)}/aliases/{self._alias(alias)}", {"version": int})

    def datasets(self) -> list[dict[str, Any]]:
        """Every registered dataset, newest first, page by page."""
        return list(self._pages("/datasets", "items", shapes.DATASET, {"limit": 1000}))

    def dataset(self, dataset_id: str) -> dict[str, Any]:
        """One registered dataset (``GET /datasets/{id}``): ``uri``, ``format``, ``schema``, ``num_rows``,
        ``samples``, ``summary`` (``pending`` until a remote one has been read, then ``complete`` or ``failed``)."""
        return self._shaped("GET", f"/datasets/{self._segment(dataset_id, 'a dataset id')}", shapes.DATASET)

    def register_dataset(self, body: dict[str, Any]) -> dict[str, Any]:
        """Register a dataset (``POST /datasets``: ``uri``, ``format``, ... docs/datasets.md): the dataset; its
        ``id`` can then be a body's ``dataset.uri``."""
        return self._shaped("POST", "/datasets", shapes.DATASET, json=body)

    def set_alias(self, name: str, alias: str, version: int) -> dict[str, Any]:
        """Point ``alias`` of the model ``name`` at ``version``: ``{"name", "alias", "version"}``."""
        path = f"/models/{self._model_name(name)}/aliases/{self._alias(alias)}"
        return self._shaped("PUT", path, {"version": int}, json={"version": version})

    def delete_alias(self, name: str, alias: str) -> None:
        """Remove ``alias`` from the model ``name`` (``DELETE /models/{name}/aliases/{alias}``)."""
        self.request("DELETE", f"/models/{self._model_name(name)}/aliases/{self._alias(alias)}")

    @staticmethod
    def _alias(alias: str) -> str:
        """``alias`` quoted for a path; empty or dots alone is a :class:`UsageError` (``..`` is the model's path)."""
        return Client._segment(alias, "an alias")

    @staticmethod
    def _segment(text: str, what: str) -> str:
        """``text`` as one path segment; empty or dots alone is a :class:`UsageError` before any request (an HTTP
        client removes ``.`` and ``..`` segments: ``/models/m/tags/..`` would be ``/models/m``)."""
        if not text.strip("."):
            raise UsageError(f"{what} cannot be empty or only dots, got {text!r}")
        return quote(text, safe="")

    def _version_path(self, name: str, version: int) -> str:
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise UsageError(f"a version is a whole number from 1, got {version!r}")
        return f"/models/{self._model_name(name)}/versions/{version}"

    def _tag_path(self, name: str, key: str, version: int | None) -> str:
        owner = f"/models/{self._model_name(name)}" if version is None else self._version_path(name, version)
        return f"{owner}/tags/{self._segment(key, 'a tag key')}"

    @staticmethod
    def _ref(model: ModelRef | str) -> ModelRef:
        """``model`` as a :class:`ModelRef`: ``"NAME"``, ``"NAME:3"`` or ``"NAME@ALIAS"`` parsed as the CLI does."""
        if isinstance(model, ModelRef):
            return model
        if not isinstance(model, str):
            raise UsageError(f"a model is 'NAME', 'NAME:VERSION', 'NAME@ALIAS' or a ModelRef, got {model!r}")
        try:
            return ModelRef.parse(model)
        except ValueError as exc:
            raise UsageError(str(exc)) from None

    @staticmethod
    def _model_name(name: str) -> str:
        """``name`` quoted for a path; a name no model can have is a :class:`UsageError` with the rule."""
        if not MODEL_NAME.match(name):
            raise UsageError(f"no model is named {name!r}: {NAME_RULE}")
        return quote(name, safe="")

    def resolve(self, ref: ModelRef, *, again: bool = True) -> int:
        """The version number a reference names: itself, an alias's target, or the newest version. A name without
        a version is refused as the service refuses it for a prediction (a 409 while its first training job runs, a
        404 that suggests the name meant); one registered in between is asked for again (``again``: once). A name
        no model can have (``foo/bar``) is a :class:`UsageError` that gives the service's rule, before any
        request."""
        name = self._model_name(ref.name)
        if ref.version is not None:
            return ref.version
        try:
            model: dict[str, Any] | None = self._shaped(
                "GET", f"/models/{name}", {"aliases": dict}, optional=shapes.MODEL_OPTIONAL
            )
        except ApiError as exc:
            if exc.status != 404:
                raise
            model = None
        if model is not None and ref.alias is not None:
            if ref.alias in model["aliases"]:
                return int(model["aliases"][ref.alias])
            known = ", ".join(model["aliases"]) or "none"
            detail = f"Model {ref.name!r} has no alias {ref.alias!r} (aliases: {known})."
            raise ApiError(404, {"title": "Not found", "status": 404, "detail": detail})
        if model is not None and model["latest_version"] is not None:
            return int(model["latest_version"])
        self.request("GET", f"/v2/models/{name}/ready")  # the service's own why: resolved as a prediction's model
        if again:  # ready after all: a version was registered since /models/{name} was asked
            return self.resolve(ref, again=False)
        detail = f"Model {ref.name!r} has no version yet; ask again (one was registered just now)."
        raise ApiError(404, {"title": "Not found", "status": 404, "detail": detail})

    def signature(self, ref: ModelRef | str) -> dict[str, Any]:
        """What a model version takes and answers: ``{"inputs": [...], "outputs": [...], ...}`` (empty lists for a
        version without one). ``ref``: ``"NAME"``, ``"NAME:3"``, ``"NAME@ALIAS"`` or a :class:`ModelRef`."""
        ref = self._ref(ref)
        path = f"/models/{ref.name}/versions/{self.resolve(ref)}"
        version = self._shaped("GET", path, {}, optional={"signature": dict})
        signature = version.get("signature") or {"inputs": [], "outputs": []}
        inputs = self._check(path, shapes.checked, signature, {"inputs": list})["inputs"]
        for spec in inputs:
            self._check(path, shapes.checked, spec, {"type": str}, {"name": str})
        return dict(signature)

    def download(
        self, ref: ModelRef | str, dest: str | os.PathLike[str] | None = None, *, fmt: str = "archive"
    ) -> Path:
        """Save a model version's archive (``.tar.gz``), or ``fmt`` (``mlflow``, ``onnx``: a ``.zip``); its path.
        ``ref``: ``"NAME"``, ``"NAME:3"``, ``"NAME@ALIAS"`` or a :class:`ModelRef`; docs/models-elsewhere.md loads
        what it saves.

        ``dest`` is a file, or a folder when it ends with a slash or is one already: a folder ending with a slash
        is created (with its parents), a file's folder must be there already (:class:`LocalFileError` before any
        request, nothing created), and a file in a folder is named as the service names it
        (``Content-Disposition``, ``NAME-vN.tar.gz``). None is the current folder; ``-`` is refused (not stdout)."""
        ref = self._ref(ref)
        text = os.fspath(dest) if dest is not None else ""
        if text == "-":
            raise LocalFileError(
                "-o -: the archive is not written to stdout; give a file or a folder (a file named -: ./-)"
            )
        into = not text or text.endswith(("/", os.sep)) or Path(text).is_dir()
        if not into:
            check_folder(Path(text).parent)
        version = self.resolve(ref)
        path = f"/models/{ref.name}/versions/{version}/artifact" + ("" if fmt == "archive" else f"?format={fmt}")
        try:
            with self._http.stream("GET", path) as response:
                if response.status_code >= 400:
                    response.read()
                    raise_for(response)
                if into:
                    name = attachment_name(response) or f"{ref.name}-v{version}" + (
                        ".tar.gz" if fmt == "archive" else f"-{fmt}.zip"
                    )
                    target = Path(text or ".") / name
                else:
                    target = Path(text)
                make_folder(target.parent)
                save(response, target)
        except httpx.TransportError as exc:
            raise self._not_sent(exc) from None
        return target


def _until(lines: Iterator[str], deadline: float | None) -> Iterator[str]:
    """``lines`` (its pings too), until ``deadline`` (``time.monotonic()``): then :class:`_Expired`."""
    for line in lines:
        if deadline is not None and time.monotonic() >= deadline:
            raise _Expired
        yield line
