"""The CLI given what a sparktrain service never answers (JSON of another shape, a 404 without a title, a 500) by a
small stand-in that answers garbage, and given secrets (a key, a URL's password) that must never be printed. Also
what needs no service: bodies with NaN, array cells, the client's paging (httpx's MockTransport)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from sparktrain._csv import CellError, typed_rows
from sparktrain._urls import masked
from sparktrain.client import Client, NotTheService, UsageError
from tests.sparktrain.test_cli import REPO

JOB = "cd" * 16
NOBODY = "http://127.0.0.1:9"  # nothing listens there


class _Garbage(BaseHTTPRequestHandler):
    """Answers every request with ``answer`` (status, JSON or text, content type) and keeps the headers it got."""

    answer: ClassVar[tuple[int, Any, str]] = (200, {}, "application/json")
    headers_seen: ClassVar[list[dict[str, str]]] = []

    def _reply(self) -> None:
        type(self).headers_seen.append(dict(self.headers))
        self.rfile.read(int(self.headers.get("content-length") or 0))
        status, value, kind = type(self).answer
        data = value.encode() if isinstance(value, str) else json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = _reply  # noqa: N815 (http.server names its handlers so)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def garbage() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def run(*args: str, url: str = NOBODY, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    environ = {"SPARKTRAIN_URL": url, "PATH": "/usr/bin:/bin", "COLUMNS": "200", **env}
    return subprocess.run([sys.executable, "-m", "sparktrain", *args], input=stdin, capture_output=True, text=True,
                          env=environ, check=False, timeout=120, cwd=REPO)  # fmt: skip


def _answered(answer: tuple[int, Any, str], *args: str, url: str, **env: str) -> subprocess.CompletedProcess[str]:
    _Garbage.answer = answer
    _Garbage.headers_seen.clear()
    return run(*args, url=url, **env)


@pytest.mark.parametrize("value", [{"foo": 1}, [], {"items": [{"foo": 1}]}, {"id": None, "status": "QUEUED"}])
@pytest.mark.parametrize("command", [("jobs",), ("models",), ("submit", "BODY"), ("show", JOB), ("datasets",)])
def test_json_of_another_shape_is_not_a_sparktrain_service(
    garbage: str, tmp_path: Path, value: Any, command: tuple[str, ...]
) -> None:
    """KeyError/TypeError tracebacks (exit 1), or `QUEUED job None` (exit 0)."""
    (tmp_path / "body.json").write_text('{"name": "x"}')
    args = [str(tmp_path / "body.json") if a == "BODY" else a for a in command]
    done = _answered((200, value, "application/json"), *args, url=garbage)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "not as a sparktrain service does: check --url or SPARKTRAIN_URL" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == "", done


def test_a_404_without_a_title_and_a_500_and_a_503(garbage: str) -> None:
    """`refused: 404 : Not Found`; a 500 exited 1 (the job failed); a 503 did not name the URL."""
    missing = _answered((404, {"detail": "Not Found"}, "application/json"), "show", JOB, url=garbage)
    assert missing.returncode == 2 and missing.stderr.strip() == "refused: 404 Not Found", missing.stderr
    problem = {"title": "Internal error", "status": 500, "detail": "It failed.", "request_id": "req-1"}
    failed = _answered((500, problem, "application/problem+json"), "show", JOB, url=garbage)
    assert failed.returncode == 5, failed.stderr
    assert failed.stderr.strip() == (
        "the service failed: 500 Internal error: It failed. (request id req-1); report it to the service's operators"
    ), failed.stderr
    plain = _answered((501, "Not Implemented", "text/plain"), "jobs", url=garbage)
    assert plain.returncode == 5 and "501 Not Implemented" in plain.stderr, plain.stderr
    busy = _answered(
        (503, {"title": "Service unavailable", "detail": "Busy."}, "application/json"), "jobs", url=garbage
    )
    assert busy.returncode == 4 and f"unreachable: {garbage}/jobs" in busy.stderr and "503: Busy." in busy.stderr


def test_a_urls_password_is_never_printed(garbage: str) -> None:
    """`http://bob:s3cret@host:8029` was printed whole when it did not answer, or was not the service."""
    assert masked("http://bob:s3cret@host:8029/x?y") == "http://bob:***@host:8029/x?y"
    assert masked("https://bob:a:b@c@host") == "https://bob:***@host"
    assert masked("http://bob@host") == "http://bob@host" and masked("http://host:1") == "http://host:1"
    down = run("jobs", url="http://bob:s3cret@127.0.0.1:9")
    assert down.returncode == 4 and "http://bob:***@127.0.0.1:9" in down.stderr, down.stderr
    other = _answered((200, "<html>", "text/html"), "jobs", url=garbage.replace("//", "//bob:s3cret@"))
    assert other.returncode == 2 and "bob:***@" in other.stderr, other.stderr
    bad_port = run("jobs", url="http://bob:s3cret@127.0.0.1:abc")
    for done in (down, other, bad_port):
        assert "s3cret" not in done.stderr + done.stdout, done


def test_an_api_key_with_spaces_or_a_line_break_around_it_is_sent_without_them(garbage: str) -> None:
    """A key from a .env file or a k8s secret (`key\\n`): "unreachable: ... Illegal header value b'Bearer <key>'"."""
    page: dict[str, Any] = {"items": [], "next_cursor": None}
    for given in ("s3cret-key\n", "  s3cret-key\t", "s3cret-key\r\n"):
        done = _answered((200, page, "application/json"), "jobs", url=garbage, SPARKTRAIN_API_KEY=given)
        assert done.returncode == 0 and "s3cret" not in done.stderr, done.stderr
        assert _Garbage.headers_seen[-1]["Authorization"] == "Bearer s3cret-key"
    flag = _answered((200, page, "application/json"), "--api-key", " s3cret-key\n", "jobs", url=garbage)
    assert flag.returncode == 0 and _Garbage.headers_seen[-1]["Authorization"] == "Bearer s3cret-key", flag.stderr


@pytest.mark.parametrize(("key", "kind"), [("s3cret\nkey", "a control character"), ("s3crét", "not ASCII")])
def test_a_key_a_header_cannot_carry_is_a_usage_error_that_never_shows_it(key: str, kind: str) -> None:
    """Exit 4 with the key in the message, or a UnicodeEncodeError traceback (exit 1)."""
    for done, source in ((run("jobs", SPARKTRAIN_API_KEY=key), "SPARKTRAIN_API_KEY"),
                         (run("--api-key", key, "jobs"), "--api-key")):  # fmt: skip
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert f"the API key (from {source}) holds" in done.stderr and kind in done.stderr, done.stderr
        assert "s3cr" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    with pytest.raises(UsageError, match="idempotency key holds a control character") as caught:
        Client(NOBODY).train({}, idempotency_key="a\nb")
    assert "a\nb" not in str(caught.value)


def test_a_header_httpx_refuses_is_not_unreachable() -> None:
    """httpx.LocalProtocolError was said as "unreachable" (exit 4), quoting the header, the key in it."""
    api = Client("http://svc", "k3y-s3cret")

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.LocalProtocolError(f"Illegal header value b'Bearer k3y-s3cret {request.url}'")

    api._http = httpx.Client(base_url="http://svc", transport=httpx.MockTransport(refuse))
    with pytest.raises(UsageError, match="the request was not sent") as caught:
        api.jobs()
    assert "k3y-s3cret" not in str(caught.value) and "Bearer ***" in str(caught.value)


@pytest.mark.parametrize("command", ["submit", "evaluate"])
@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"name": "x", "lr": NaN}', "NaN is not a JSON number (line 1 column 21)"),
        ('{"name": "NaN",\n "x": [1, -Infinity]}', "-Infinity is not a JSON number (line 2 column 11)"),
        ('{"x": Infinity}', "Infinity is not a JSON number (line 1 column 7)"),
    ],
)
def test_a_body_with_nan_or_infinity_is_not_json(tmp_path: Path, command: str, text: str, says: str) -> None:
    """json.loads read them, then httpx refused to send them: a traceback ("Out of range float values"), exit 1."""
    (tmp_path / "body.json").write_text(text)
    done = run(command, str(tmp_path / "body.json"))
    assert done.returncode == 2 and done.stderr.strip() == f"{tmp_path / 'body.json'}: not JSON: {says}", done.stderr
    piped = run(command, "-", stdin=text)
    assert piped.returncode == 2 and piped.stderr.strip() == f"stdin: not JSON: {says}", piped.stderr
    with pytest.raises(UsageError, match="its body is not JSON"):
        Client(NOBODY).train({"x": float("nan")})


def test_a_body_from_stdin_is_read_and_a_missing_one_named() -> None:
    """`submit -` said "-: No such file or directory"."""
    empty = run("submit", "-", stdin="")
    assert empty.returncode == 2 and empty.stderr.startswith("stdin: not JSON: Expecting value"), empty.stderr
    listed = run("submit", "-", stdin="[1]")
    assert listed.returncode == 2 and listed.stderr.strip() == "stdin: the body must be a JSON object", listed.stderr
    closed = subprocess.run(["bash", "-c", 'exec "$0" -m sparktrain --url http://127.0.0.1:9 submit - <&-',
                             sys.executable], capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
    assert closed.returncode == 2 and "stdin is closed" in closed.stderr, closed.stderr


def test_an_array_column_takes_a_json_array_in_a_quoted_cell() -> None:
    """A cell "[0, 1.5]" of the digits model's pixels was sent as the text "[0, 1.5]"."""
    types = {"pixels": "array", "x": "double"}
    assert typed_rows(["pixels", "x"], [["[0, 1.5, 3]", "2"], ["", "1"]], types) == [[[0, 1.5, 3], 2], [None, 1]]
    for bad, why in (("[0", "'[0' is not JSON"), ("7", "'7' is not an array"), ("[NaN]", "NaN is not a JSON number")):
        said = "column 'pixels' takes an array, written as a JSON array in the cell, quoted: \"[0, 1.5, 3]\""
        with pytest.raises(CellError, match=re.escape(said)) as caught:
            typed_rows(["x", "pixels"], [["1", "[1]"], ["1", bad]], types)
        assert caught.value.row == 1 and why in str(caught.value)


def _pages(answers: dict[str | None, Any]) -> tuple[Client, list[str | None]]:
    """A client whose GETs are answered by cursor (None: the first page); the cursors asked, in order."""
    asked: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params.get("cursor"))
        return httpx.Response(200, json=answers[asked[-1]])

    api = Client("http://svc")
    api._http = httpx.Client(base_url="http://svc", transport=httpx.MockTransport(answer))
    return api, asked


def test_models_follows_next_cursor_to_the_last_page() -> None:
    """GET /models pages (next_cursor, ?cursor=) like /jobs: models() read the first page only."""
    model: dict[str, Any] = {"name": "m", "versions": [], "aliases": {}, "latest_version": None}
    api, asked = _pages({None: {"items": [model], "next_cursor": "c1"},
                         "c1": {"items": [{**model, "name": "n"}], "next_cursor": "c2"},
                         "c2": {"items": [{**model, "name": "o"}]}})  # fmt: skip
    assert [m["name"] for m in api.models()] == ["m", "n", "o"] and asked == [None, "c1", "c2"]
    api, asked = _pages({None: {"items": [model]}})  # a service that does not page yet
    assert len(api.models()) == 1 and asked == [None]
    api, _ = _pages({None: {"items": [model], "next_cursor": "c1"}, "c1": {"items": [model], "next_cursor": "c1"}})
    with pytest.raises(NotTheService, match="a next_cursor it gave before"):
        api.models()


def test_main_in_a_process_that_goes_on_leaves_ctrl_c_as_it_was() -> None:
    """main() installed its once-only Ctrl-C handler for good: after it, an in-process caller's Ctrl-C was ignored
    after the first (review)."""
    import signal

    from sparktrain.cli import main

    outer = signal.signal(signal.SIGINT, signal.default_int_handler)  # (pytest-xdist's workers ignore SIGINT)
    try:
        assert main(["--version"]) == 0
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, outer)


@pytest.mark.parametrize("alias", ["..", ".", ""])
def test_an_alias_of_dots_alone_is_refused_before_any_request(alias: str) -> None:
    """``..`` in the path was normalized by httpx: ``delete_alias("m", "..")`` sent DELETE /models/m."""
    with pytest.raises(UsageError, match="empty or only dots"):
        Client(NOBODY).delete_alias("m", alias)
    with pytest.raises(UsageError, match="empty or only dots"):
        Client(NOBODY).set_alias("m", alias, 1)
