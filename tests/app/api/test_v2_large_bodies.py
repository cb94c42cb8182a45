"""A large V2 inference body does not hold the service, over real HTTP (as tests/app/api/test_large_bodies.py for
``/predict``).

``POST /v2/models/{name}/infer`` parsed its body with pydantic's JSON parser on the event loop: 0.9 s for 8 MB of
numbers, during which the driver answered nothing. The test pauses whichever parser reads the body (``json.loads``
of the piece that holds a marker, or ``InferRequest.model_validate_json`` of a body that holds it) rather than time
anything: while it is paused, ``/healthz`` must answer, which it cannot while the loop is the one parsing."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.schemas.inference import InferRequest
from tests.helpers import Service, problem, running_service

MARK = "v2-parse-marker-51c9"
WAIT_S = 120.0


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(spark, tmp_path_factory.mktemp("v2bodies")) as service:
        yield service


class _Paused:
    """Pauses the first parse of a text holding :data:`MARK` until ``resume`` is set."""

    def __init__(self) -> None:
        self.reached, self.resume = threading.Event(), threading.Event()

    def hold(self, text: Any) -> None:
        if not isinstance(text, bytes | bytearray | str) or self.reached.is_set():
            return
        if (MARK.encode() if isinstance(text, bytes | bytearray) else MARK) in text:
            self.reached.set()
            self.resume.wait(WAIT_S)


@pytest.fixture
def paused(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Paused]:
    pause, loads, validate_json = _Paused(), json.loads, InferRequest.model_validate_json

    def paused_loads(text: Any, *args: Any, **kwargs: Any) -> Any:
        pause.hold(text)
        return loads(text, *args, **kwargs)

    def paused_validate_json(data: Any, *args: Any, **kwargs: Any) -> InferRequest:
        pause.hold(data)
        return validate_json(data, *args, **kwargs)

    monkeypatch.setattr(json, "loads", paused_loads)
    monkeypatch.setattr(InferRequest, "model_validate_json", paused_validate_json)
    try:
        yield pause
    finally:
        pause.resume.set()


def _infer_body(rows: int, width: int = 11) -> bytes:
    data = "[" + ", ".join(["1.5"] * (rows * width)) + "]"
    return ('{"id": "' + MARK + '", "inputs": [{"name": "input", "shape": [' + f"{rows}, {width}" + '], '
            '"datatype": "FP64", "data": ' + data + "}]}").encode()  # fmt: skip


def test_health_answers_while_a_large_v2_body_is_parsed(svc: Service, paused: _Paused) -> None:
    body = _infer_body(20_000)  # 220,000 numbers, 1.1 MB
    assert len(body) > 256 * 1024
    answer: list[httpx.Response] = []
    send = lambda: answer.append(svc.client.post("/v2/models/no-such-model/infer", content=body))  # noqa: E731
    big = threading.Thread(target=send)
    big.start()
    assert paused.reached.wait(WAIT_S), "the body was never parsed"
    with httpx.Client(base_url=svc.url, timeout=30) as other:
        health = other.get("/healthz")  # the loop answers: the parse waits on a worker thread
    assert health.status_code == 200 and big.is_alive() and not answer
    paused.resume.set()
    big.join(WAIT_S)
    found = problem(answer[0], 404)  # parsed whole, then the model looked up
    assert "no-such-model" in found["detail"] and found["error"] == found["detail"], found


def test_a_large_v2_body_parses_as_a_small_one(svc: Service) -> None:
    """Off the loop, the body is the same request: a malformed one the same 400, one off the schema the same 422,
    each in the protocol's form (an ``error`` member)."""
    body = _infer_body(20_000)
    broken = problem(svc.client.post("/v2/models/m/infer", content=body[:-4] + b",]}]}"), 400)
    assert broken["detail"].startswith("The body is not valid JSON: Expecting value at character"), broken
    with pytest.raises(json.JSONDecodeError) as whole:
        json.loads(body[:-4] + b",]}]}")
    assert broken["detail"].endswith(f" at character {whole.value.pos + 1}") and "error" in broken, broken
    off_schema = problem(svc.client.post("/v2/models/m/infer", content=body.replace(b'"datatype"', b'"kind"')), 422)
    assert [(e["loc"], e["msg"]) for e in off_schema["errors"]] == [("inputs[0].datatype", "Field required")]
    assert "error" in off_schema, off_schema
    trailing = problem(svc.client.post("/v2/models/m/infer", content=body + b"\x00\x01\xff\xfe" * 100), 400)
    assert "Inference-Header-Content-Length" in trailing["detail"], trailing
