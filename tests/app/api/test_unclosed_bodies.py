"""A large body that opens an array or object and does not close it as one value should (unclosed, closed by the
other bracket, or followed by more) is parsed a piece at a time too, and refused with json.loads's error.

Such a body went to one ``json.loads`` of it all (app/api/json_body.py, ``Shape._value``), which holds the GIL for
the whole body: an unclosed 8 MB ``[1,1,1,...`` froze the API as the bodies of F3 did. The tests record what each
``json.loads`` call is given (ordering and sizes, no timing): no call may be given more than a piece of the body,
and while the piece that holds a marker is paused, ``/healthz`` answers. The error is json.loads's own, at the same
character, as for a small body."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api import json_body
from app.api.json_body import PIECE_BYTES, parse_in_pieces
from tests.app.api.test_json_body import _VALUES
from tests.helpers import Service, problem, running_service

MARK = "unclosed-marker-9c41"
WAIT_S = 120.0
JSON = {"content-type": "application/json"}
SLACK = 8  # what a piece is wrapped in: "[", "]", '{"":', "}"
LARGEST = 2 * PIECE_BYTES + SLACK  # a run of small items is those that start in one window of PIECE_BYTES


class _Recorded:
    """``json.loads``, recording the size of every text it is given; it pauses on the first text that holds
    :data:`MARK` until ``resume`` is set (only where ``pause``)."""

    def __init__(self, pause: bool) -> None:
        self.real, self.sizes, self.marked = json.loads, list[int](), list[int]()
        self.pause, self.reached, self.resume = pause, threading.Event(), threading.Event()

    def __call__(self, text: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(text, bytes | bytearray | str):
            self.sizes.append(len(text))
            if (MARK.encode() if isinstance(text, bytes | bytearray) else MARK) in text and not self.reached.is_set():
                self.marked.append(len(text))
                self.reached.set()
                if self.pause:
                    self.resume.wait(WAIT_S)
        return self.real(text, *args, **kwargs)


def _error(parse: Callable[[bytes], Any], text: bytes) -> tuple[str, int, int, int]:
    with pytest.raises(json.JSONDecodeError) as caught:
        parse(text)
    return caught.value.msg, caught.value.pos, caught.value.lineno, caught.value.colno


_PUT = st.sampled_from(["[", "]", "{", "}", ",", ":", " ", "x", '"', " " * 12, ", " * 3])
_CORRUPT = st.tuples(st.sampled_from(["cut", "insert", "delete"]), st.integers(0, 10**6), _PUT)


@settings(max_examples=500, deadline=None)
@given(value=_VALUES, ascii_only=st.booleans(), indent=st.sampled_from([None, 1]), piece=st.integers(2, 40),
       corrupt=_CORRUPT)  # fmt: skip
def test_a_broken_body_is_refused_as_json_loads_refuses_it(
    value: Any, ascii_only: bool, indent: int | None, piece: int, corrupt: tuple[str, int, str]
) -> None:
    """Cut short, a bracket or comma put in or taken out: the pieces raise json.loads's error (its words, its
    character, line and column), or give its value."""
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent)
    how, at, char = corrupt
    at %= len(text) + 1
    text = (
        text[:at] if how == "cut" else text[:at] + char + text[at:] if how == "insert" else text[:at] + text[at + 1 :]
    )
    body = text.encode()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(json_body, "PIECE_BYTES", piece)
        try:
            whole = json.loads(body)
        except json.JSONDecodeError:
            assert _error(parse_in_pieces, body) == _error(json.loads, body), body
        except RecursionError:
            pass
        else:
            assert parse_in_pieces(body) == whole


_ROW = "[" + ", ".join(["1.5"] * 7) + "]"
_ROWS = ", ".join([_ROW] * 600)
_NUMBERS = ", ".join(["1"] * 3000)


@pytest.mark.parametrize(
    "text",
    [f"[{_NUMBERS}", f"[{_NUMBERS},", f"[{_NUMBERS},  ", f'{{"inputs": [{_ROWS}', f'{{"inputs": [{_ROWS}]',
     f'{{"inputs": [{_ROWS}], "b"', f'{{"inputs": [{_ROWS}], "b": ', f'{{"inputs": [{_ROWS}], "b": [{_NUMBERS}',
     f"[{_ROWS}}}", f'{{"inputs": [{_ROWS}]]', f"[[{_NUMBERS}}}]", f"[{_NUMBERS}]]", f"[{_NUMBERS}] x",
     f"[{_NUMBERS}] [{_NUMBERS}]", f'{{"a": [[{_NUMBERS}] x, 1]}}', f'{{"a": {{"b": [{_NUMBERS}] x}}}}',
     f'[{_NUMBERS}, {{"é": [{_NUMBERS}', f'\n[\n{_ROWS},\n"\\"],[", [1 2'],
)  # fmt: skip
def test_a_large_broken_body_is_parsed_a_piece_at_a_time(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unclosed at any depth, closed by the other bracket, or followed by more: no json.loads call is given more than
    a piece (it was given the whole body), and the error is json.loads's of the whole body."""
    body = text.encode()
    expected = _error(json.loads, body)
    monkeypatch.setattr(json_body, "PIECE_BYTES", 64)
    recorded = _Recorded(pause=False)
    monkeypatch.setattr(json, "loads", recorded)
    assert _error(parse_in_pieces, body) == expected
    assert len(body) > 8_000 and max(recorded.sizes) <= 2 * 64 + SLACK, sorted(recorded.sizes)[-3:]


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(spark, tmp_path_factory.mktemp("unclosed")) as service:
        yield service


@pytest.fixture
def paused(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Recorded]:
    loads = _Recorded(pause=True)
    monkeypatch.setattr(json, "loads", loads)
    try:
        yield loads
    finally:
        loads.resume.set()


def _send_paused(svc: Service, paused: _Recorded, path: str, body: bytes) -> httpx.Response:
    """``body`` sent to ``path``; while its marked piece is paused, ``/healthz`` must answer."""
    assert len(body) > 256 * 1024
    answer: list[httpx.Response] = []
    big = threading.Thread(target=lambda: answer.append(svc.client.post(path, content=body, headers=JSON)))
    big.start()
    try:
        assert paused.reached.wait(WAIT_S), "the body was never parsed"
        assert paused.marked[0] <= LARGEST, f"one json.loads was given {paused.marked[0]} bytes of the body"
        with httpx.Client(base_url=svc.url, timeout=60) as other:
            health = other.get("/healthz")  # the loop answers: the parse waits on a worker thread
        assert health.status_code == 200 and big.is_alive() and not answer
    finally:
        paused.resume.set()
        big.join(WAIT_S)
    assert max(paused.sizes) <= LARGEST, f"one json.loads was given {max(paused.sizes)} bytes"
    return answer[0]


def _malformed_as_json_loads_says(response: httpx.Response, body: bytes) -> dict[str, Any]:
    found = problem(response, 400)
    msg, pos, _, _ = _error(json.loads, body)
    assert found["type"].endswith("/malformed-json"), found
    assert found["detail"].startswith(f"The body is not valid JSON: {msg} at character {pos + 1}"), found
    return found


def test_an_unclosed_predict_body_does_not_hold_the_service(svc: Service, paused: _Recorded) -> None:
    """An unclosed ``{"instances": [[...], [...`` of 1.6 MB: parsed a piece at a time on a worker thread, then the
    400 a small unclosed body gets, at the same character."""
    row = "[" + ", ".join(["1.5"] * 60) + "]"
    body = ('{"model": {"name": "' + MARK + '"}, "instances": [' + ", ".join([row] * 6000)).encode()
    response = _send_paused(svc, paused, "/predict", body)
    _malformed_as_json_loads_says(response, body)
    small = body[:2000]  # parsed by FastAPI, on the loop
    _malformed_as_json_loads_says(svc.client.post("/predict", content=small, headers=JSON), small)


def test_an_unclosed_v2_body_does_not_hold_the_service(svc: Service, paused: _Recorded) -> None:
    """An inference request whose ``data`` runs to the end of 1.1 MB: the V2 route's 400, in the protocol's form."""
    data = ", ".join(["1.5"] * 220_000)
    body = ('{"id": "' + MARK + '", "inputs": [{"name": "input", "shape": [20000, 11], "datatype": "FP64", "data": ['
            + data).encode()  # fmt: skip
    response = _send_paused(svc, paused, "/v2/models/no-such-model/infer", body)
    found = _malformed_as_json_loads_says(response, body)
    assert "error" in found, found  # the protocol's member
