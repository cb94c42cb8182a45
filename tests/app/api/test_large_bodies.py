"""A large body does not hold the service (security walkthrough F3), over real HTTP.

An 8 MB body was parsed on the event loop, and ``/healthz`` waited seconds for it. The tests pause the parse itself
(``json.loads`` of the piece that holds a marker waits for an event) rather than time anything: while the body's
parse is paused, ``/healthz`` must answer, which it cannot while the loop is the one parsing. Bodies that are
refused anyway are refused before they are parsed at all."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.helpers import Service, linear_train_body, problem, running_service

MARK = "parse-marker-7f3a"
JSON = {"content-type": "application/json"}
WAIT_S = 120.0


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(spark, tmp_path_factory.mktemp("bodies"), max_predict_rows=1000) as service:
        yield service


class _Paused:
    """``json.loads``, which pauses on the first text holding :data:`MARK` until ``resume`` is set."""

    def __init__(self) -> None:
        self.real, self.reached, self.resume = json.loads, threading.Event(), threading.Event()

    def __call__(self, text: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(text, bytes | bytearray | str) and not self.reached.is_set():
            marked = MARK.encode() in text if isinstance(text, bytes | bytearray) else MARK in text
            if marked:
                self.reached.set()
                self.resume.wait(WAIT_S)
        return self.real(text, *args, **kwargs)


@pytest.fixture
def paused(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Paused]:
    loads = _Paused()
    monkeypatch.setattr(json, "loads", loads)
    try:
        yield loads
    finally:
        loads.resume.set()


def _rows(n: int, width: int) -> bytes:
    row = "[" + ", ".join(["1.5"] * width) + "]"
    return _body("instances", "[" + ", ".join([row] * n) + "]")


def _body(field: str, value: str) -> bytes:
    return ('{"model": {"name": "' + MARK + '"}, "' + field + '": ' + value + "}").encode()


def test_health_checks_answer_while_a_large_body_is_parsed(svc: Service, paused: _Paused) -> None:
    body = _rows(1000, 60)  # 1000 rows (the limit), 0.3 MB
    assert len(body) > 256 * 1024
    answer: list[httpx.Response] = []
    big = threading.Thread(target=lambda: answer.append(svc.client.post("/predict", content=body, headers=JSON)))
    big.start()
    assert paused.reached.wait(WAIT_S), "the body was never parsed"
    with httpx.Client(base_url=svc.url, timeout=60) as other:
        health = other.get("/healthz")  # the loop answers: the parse waits on a worker thread
    assert health.status_code == 200 and big.is_alive() and not answer
    paused.resume.set()
    big.join(WAIT_S)
    assert "no model" in problem(answer[0], 404)["detail"].lower() or MARK in answer[0].text, answer[0].text


def test_too_many_rows_are_refused_before_they_are_parsed(svc: Service, paused: _Paused) -> None:
    """2,000,000 rows were parsed (seconds) before the row limit said 413."""
    row, n = "[1.5]", 100_000
    rows = ", ".join([row] * n)
    for field, value in (("instances", f"[{rows}]"), ("inputs", f"[{rows}]"),
                         ("dataframe_records", "[" + ", ".join(['{"a": 1.5}'] * n) + "]"),
                         ("dataframe_split", '{"columns": ["a"], "data": [' + rows + "]}")):  # fmt: skip
        response = svc.client.post("/predict", content=_body(field, value), headers=JSON)
        found = problem(response, 413)
        assert found["detail"].startswith(f"{n} rows; online /predict takes at most 1000."), found
        assert not paused.reached.is_set(), f"the rows of {field} were parsed first"


def test_a_large_body_where_no_rows_go_is_refused_before_it_is_parsed(svc: Service, paused: _Paused) -> None:
    body = linear_train_body("large")
    body["dataset"] = {**body["dataset"], "features": [MARK] + ["x"] * 400_000}  # 1.6 MB
    response = svc.client.post("/train", json=body)
    found = problem(response, 413)
    assert found["detail"].startswith(f"The body has {len(response.request.content)} bytes; at most 1048576"), found
    assert not paused.reached.is_set(), "the body was parsed first"


def test_malformed_large_bodies_are_answered_as_before(svc: Service) -> None:
    body = _rows(900, 60)
    broken = problem(svc.client.post("/predict", content=body[:-2] + b",]}", headers=JSON), 400)
    assert broken["detail"].startswith("The body is not valid JSON: Expecting value at character"), broken
    with pytest.raises(json.JSONDecodeError) as whole:
        json.loads(body[:-2] + b",]}")
    assert broken["detail"].endswith(f" at character {whole.value.pos + 1}"), broken  # as for the whole body
