"""The CLI with a reader gone from stdout or from stderr, and the reviewer's other finds, against a small stand-in
for the service (an HTTP server answering the few routes the commands ask; no Spark): a closed stdout is exit 141
and quiet whatever the command and however Python buffers it (PYTHONUNBUFFERED is dropped: block-buffered, as in a
shell's pipe); a closed stderr only makes stderr quiet, and the command goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparktrain.client import Client, ModelRef, UsageError

JOB = "ab" * 16
MODEL = {"name": "m", "latest_version": 1, "aliases": {}, "versions": [{"version": 1, "framework": "xgboost"}]}


def _job(status: str) -> dict[str, Any]:
    return {"id": JOB, "name": "j", "type": "train", "status": status, "progress": 1.0, "created_at": "2026-01-01",
            "model": {"name": "m", "version": 1}, "result": {"classification": {"accuracy": 1.0}},
            "error": {"reason": "USER_ERROR", "message": "no"} if status == "FAILED" else None}  # fmt: skip


class _Service(BaseHTTPRequestHandler):
    """Each route's answer; a body named "fails" makes a job that fails."""

    outcome = "SUCCEEDED"

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == f"/jobs/{JOB}/events":
            data = b'event: end\nid: 1\ndata: {"status": "%s"}\n\n' % type(self).outcome.encode()
            return self._send(200, data, "text/event-stream")
        answers: dict[str, Any] = {
            "/jobs": {"items": [_job("SUCCEEDED")], "next_cursor": None},
            f"/jobs/{JOB}": _job(type(self).outcome),
            "/models": {"items": [MODEL]},
            "/models/m": MODEL,
            "/models/m/versions/1": {"signature": {"inputs": [{"name": "x1", "type": "double"}], "outputs": []}},
        }
        if path not in answers:
            return self._json(404, {"title": "Not Found", "status": 404, "detail": f"No endpoint at GET {path}"})
        return self._json(200, answers[path])

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        if self.path == "/predict":
            return self._json(200, {"predictions": [1.5] * len(body["dataframe_split"]["data"])})
        if self.path == f"/jobs/{JOB}/cancel":
            return self._json(200, _job("CANCELLED"))
        type(self).outcome = "FAILED" if body.get("name") == "fails" else "SUCCEEDED"
        return self._json(202, _job("QUEUED"))

    def _json(self, status: int, value: Any) -> None:
        self._send(status, json.dumps(value).encode(), "application/json")

    def _send(self, status: int, data: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "rows.csv").write_text("id,x1\n1,0.5\n2,4.5\n")  # id: not a column the model takes (a warning)
    (tmp_path / "train.json").write_text(json.dumps({"name": "j"}))
    (tmp_path / "fails.json").write_text(json.dumps({"name": "fails"}))
    return {"CSV": str(tmp_path / "rows.csv"), "BODY": str(tmp_path / "train.json"),
            "FAILS": str(tmp_path / "fails.json")}  # fmt: skip


def _env() -> dict[str, str]:
    """The environment without PYTHONUNBUFFERED (set in this sandbox): stdout into a pipe is block-buffered, and what
    is written late reaches the pipe only when flushed."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | {"COLUMNS": "200"}


def _run(*args: str, closed: str) -> tuple[int, str]:
    """Run sparktrain with the reader of ``closed`` (stdout or stderr) gone before it starts; the exit code and what
    the other stream got."""
    read, write = os.pipe()
    os.close(read)  # no reader at all: the first write that reaches the pipe fails (EPIPE)
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, closed: write}
    try:
        process = subprocess.Popen([sys.executable, "-m", "sparktrain", *args], env=_env(), text=True,
                                   stdin=subprocess.DEVNULL, **streams)  # fmt: skip
    finally:
        os.close(write)
    stdout, stderr = process.communicate(timeout=120)
    return process.returncode, stderr if closed == "stdout" else stdout


@pytest.mark.parametrize(
    "args",
    [
        ("--json", "jobs"),
        ("--json", "show", JOB),
        ("--json", "models"),
        ("--json", "cancel", JOB),
        ("--json", "submit", "BODY"),
        ("--json", "submit", "BODY", "--wait"),
        ("--json", "predict", "m", "--csv", "CSV"),
        ("evaluate", "BODY", "--wait"),
        ("show", JOB),
        ("jobs",),
        ("--help",),
        ("--version",),
        ("jobs", "--help"),
    ],
)
def test_a_closed_stdout_is_141_and_quiet_however_stdout_is_buffered(
    url: str, files: dict[str, str], args: tuple[str, ...]
) -> None:
    """--json output was written at exit, after main() returned: exit 120, "Exception ignored ... BrokenPipeError"
    (the walkthrough's test inherited PYTHONUNBUFFERED=1, which hid it); --help and --version exited 1."""
    code, stderr = _run("--url", url, *(files.get(a, a) for a in args), closed="stdout")
    assert code == 141 and not any(word in stderr for word in ("Exception", "Traceback", "Error")), stderr
    assert stderr == "" or args[-1] in ("CSV", "--wait"), stderr  # predict's warning; evaluate's "queued" line


@pytest.mark.parametrize(
    ("args", "code", "stdout"),
    [
        (("predict", "m", "--csv", "CSV"), 0, "1.5\n1.5\n"),  # after the "not sent (...): id" warning
        (("submit", "BODY", "--wait"), 0, f"SUCCEEDED job {JOB}\nmodel m version 1\n"),  # after the "queued" line
        (("submit", "FAILS", "--wait"), 1, ""),
        (("evaluate", "BODY", "--wait"), 0, '{\n  "classification": {\n    "accuracy": 1.0\n  }\n}\n'),
        (("--json", "submit", "FAILS", "--wait"), 1, "FAILED"),  # the reason goes to the closed stderr
        (("show", "abc"), 2, ""),  # a usage error, said on the closed stderr: still 2, not a traceback's 1
    ],
)
def test_a_closed_stderr_makes_stderr_quiet_and_the_command_goes_on(
    url: str, files: dict[str, str], args: tuple[str, ...], code: int, stdout: str
) -> None:
    """predict stopped at its warning, --wait at its "queued" line, both exit 141 with stdout empty."""
    got, out = _run("--url", url, *(files.get(a, a) for a in args), closed="stderr")
    assert got == code and (stdout in out if stdout == "FAILED" else out == stdout), (got, out)


def test_a_url_with_spaces_around_it_is_used_without_them(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--url "http://127.0.0.1:8000 "` (or SPARKTRAIN_URL from a .env file) was refused: "has a space in it"."""
    for given in (f"{url} ", f" {url}\t"):
        done = subprocess.run([sys.executable, "-m", "sparktrain", "--url", given, "--json", "models"], env=_env(),
                              capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
        assert done.returncode == 0 and json.loads(done.stdout) == [MODEL], done.stderr
    assert Client(f"{url} ").url == url
    monkeypatch.setenv("SPARKTRAIN_URL", f" {url} ")
    assert Client().url == url and Client().url_from == "SPARKTRAIN_URL"
    inner = subprocess.run([sys.executable, "-m", "sparktrain", "--url", "http://127.0.0.1 :8000", "jobs"], env=_env(),
                           capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
    assert inner.returncode == 2 and "has a space in it" in inner.stderr, inner.stderr  # inside it, still refused


def test_predict_csv_dot_slash_dash_reads_the_file_named_dash(tmp_path: Path) -> None:
    """`--csv ./-` read stdin (a Path made it -), where download takes ./- for a file named -."""
    (tmp_path / "-").write_text('x1,x2\n1,"never closed\n')  # refused before any request, naming the file
    done = subprocess.run([sys.executable, "-m", "sparktrain", "--url", "http://127.0.0.1:9", "predict", "m", "--csv",
                           "./-"], input="x1\n1\n", env=_env(), cwd=tmp_path, capture_output=True, text=True,
                          check=False, timeout=120)  # fmt: skip
    assert done.returncode == 2 and "./-: line 2: a quoted field opens there" in done.stderr, done.stderr


def test_predict_csv_dash_with_stdin_closed_is_a_one_line_usage_error() -> None:
    """`predict m --csv - <&-` was a traceback: 'NoneType' object has no attribute 'buffer'."""
    command = 'exec "$0" -m sparktrain --url http://127.0.0.1:9 predict m --csv - <&-'  # stdin closed
    done = subprocess.run(["bash", "-c", command, sys.executable], env=_env(), capture_output=True, text=True,
                          check=False, timeout=120)  # fmt: skip
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "stdin is closed" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_global_option_without_its_value_says_so() -> None:
    """`sparktrain --url` said "--url is a global option: it comes before the command", where it is already."""
    done = subprocess.run([sys.executable, "-m", "sparktrain", "--url"], env=_env(), capture_output=True, text=True,
                          check=False, timeout=120)  # fmt: skip
    assert done.returncode == 2 and "--url needs a value: sparktrain --url URL COMMAND" in done.stderr, done.stderr
    assert "comes before the command" not in done.stderr, done.stderr


def _mocked(answers: list[tuple[str, int, Any]]) -> tuple[Client, list[str]]:
    """A client whose requests get ``answers`` in order (each: the path asked, the status, the JSON)."""
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        path, status, value = answers[len(asked)]
        asked.append(request.url.raw_path.decode())
        assert asked[-1] == path, (asked, path)
        return httpx.Response(status, json=value)

    api = Client("http://svc")
    api._http = httpx.Client(base_url="http://svc", transport=httpx.MockTransport(answer))
    return api, asked


def test_resolve_asks_again_when_a_version_was_registered_in_between() -> None:
    """The /ready answer of 200 (a version registered since /models/m said none) raised "has no version yet"."""
    fresh = {**MODEL, "latest_version": None, "versions": []}
    api, asked = _mocked([("/models/m", 200, fresh), ("/v2/models/m/ready", 200, {}), ("/models/m", 200, MODEL)])
    assert api.resolve(ModelRef("m")) == 1 and len(asked) == 3


@pytest.mark.parametrize("name", ["foo/bar", "-m", ".hidden", "a b", "x" * 201])
def test_a_name_no_model_can_have_is_refused_with_the_rule(name: str) -> None:
    """foo/bar (quoted %2F, which uvicorn decodes back to /) got "No endpoint at GET /v2/models/foo/bar/ready"."""
    api, asked = _mocked([])
    for ref in (ModelRef(name), ModelRef(name, version=1)):
        with pytest.raises(UsageError, match=r"no model is named .*: a model name is 1 to 200 letters, digits"):
            api.resolve(ref)
    assert asked == []
