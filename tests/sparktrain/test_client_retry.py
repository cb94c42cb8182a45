"""The client's reads over a key's request rate: a 429 with Retry-After is waited out and asked again (three times at
most); a POST's 429 is not repeated. Against a small HTTP server that answers 429 a set number of times."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sparktrain.client import ApiError, Client


class _Limited(BaseHTTPRequestHandler):
    refusals = 0
    seen: list[str] = []

    def _answer(self) -> None:
        type(self).seen.append(self.command)
        if type(self).refusals > 0:
            type(self).refusals -= 1
            body = {"type": "about:blank", "title": "Quota exceeded", "status": 429, "detail": "slow down",
                    "quota": "requests_per_s", "limit": 1}  # fmt: skip
            self.send_response(429)
            self.send_header("Retry-After", "0")
        else:
            body = {"id": "a" * 32, "status": "SUCCEEDED"}
            self.send_response(200)
        data = json.dumps(body).encode()
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer  # noqa: N815 (http.server names its handlers so)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def limited() -> Iterator[type[_Limited]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Limited)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Limited.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    _Limited.seen = []
    try:
        yield _Limited
    finally:
        server.shutdown()


def test_a_read_over_the_rate_is_asked_again(limited: Any) -> None:
    limited.refusals = 2
    assert Client(limited.url).job("a" * 32)["status"] == "SUCCEEDED"
    assert limited.seen == ["GET", "GET", "GET"]


def test_a_read_refused_four_times_gives_up_and_a_post_is_not_repeated(limited: Any) -> None:
    limited.refusals = 10
    with pytest.raises(ApiError) as caught:
        Client(limited.url).job("a" * 32)
    assert caught.value.status == 429 and limited.seen == ["GET"] * 4
    limited.seen.clear()
    with pytest.raises(ApiError):
        Client(limited.url).cancel("a" * 32)
    assert limited.seen == ["POST"]
