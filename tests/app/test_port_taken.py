"""``python -m app`` on a port that is already taken exits at once, before it starts anything, with one line naming
SPARKTRAIN_PORT / --port and status 5. It used to start Spark and its consumer, restore the live driver's broker
messages, take jobs, and only then fail with uvicorn's ``[Errno 98] address already in use``, status 3 (which says
"database unreachable"). The sockets it listens on are handed to uvicorn (a real one here), so nothing can take the
port between the check and the start."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from app.__main__ import PORT_TAKEN_EXIT, DriverServer, cannot_listen, listen

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def taken() -> Iterator[int]:
    """A port a live server listens on, opened as uvicorn opens its own (SO_REUSEADDR)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


@pytest.mark.parametrize("how", ["--port", "SPARKTRAIN_PORT"])
def test_a_second_driver_on_a_taken_port_exits_before_starting_anything(tmp_path: Path, taken: int, how: str) -> None:
    var = tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKTRAIN_")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(REPO), SPARKTRAIN_VAR_DIR=str(var),
               SPARKTRAIN_HOST="127.0.0.1")  # fmt: skip
    command = [sys.executable, "-m", "app"]
    if how == "--port":
        command += ["--port", str(taken)]
    else:
        env["SPARKTRAIN_PORT"] = str(taken)
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == PORT_TAKEN_EXIT == 5, output[-3000:]
    assert done.stderr.strip().splitlines() == [
        f"sparktrain cannot start: 127.0.0.1:{taken} is already in use (another driver or program listens there); "
        "stop it or choose another port with SPARKTRAIN_PORT or --port"
    ], output[-3000:]
    assert "Traceback" not in output and "Spark" not in output and "consumer" not in output
    assert not (var / "broker.db").exists() and not (var / "sparktrain.db").exists(), "it started the driver"


def _app() -> Starlette:
    async def hello(request: object) -> PlainTextResponse:
        return PlainTextResponse("hello")

    return Starlette(routes=[Route("/", hello)])


def test_the_sockets_listened_on_first_are_the_ones_uvicorn_serves(caplog: pytest.LogCaptureFixture) -> None:
    sockets = listen("127.0.0.1", 0)
    port = int(sockets[0].getsockname()[1])
    with pytest.raises(OSError) as second:  # held from the first moment: a second driver is refused at once
        listen("127.0.0.1", port)
    assert second.value.errno == errno.EADDRINUSE
    assert "SPARKTRAIN_PORT or --port" in cannot_listen("127.0.0.1", port, second.value)

    app = _app()
    server = DriverServer(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None), app=app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": sockets}, daemon=True)
    with caplog.at_level("INFO", logger="uvicorn.error"):
        thread.start()
        try:
            deadline = time.monotonic() + 20
            while not server.started and time.monotonic() < deadline:
                time.sleep(0.05)
            assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).text == "hello"
        finally:
            server.should_exit = True
            thread.join(20)
    assert f"Uvicorn running on http://127.0.0.1:{port}" in caplog.text
    for sock in listen("127.0.0.1", port):  # closed with the server: the port is free again at once
        sock.close()


def test_an_address_that_is_not_this_machines_names_host_and_port() -> None:
    with pytest.raises(OSError) as exc:
        listen("192.0.2.1", 8000)  # TEST-NET-1: never a local address
    line = cannot_listen("192.0.2.1", 8000, exc.value)
    assert line.startswith("sparktrain cannot start: it cannot listen on 192.0.2.1:8000 (")
    assert "SPARKTRAIN_HOST or --host" in line and "SPARKTRAIN_PORT or --port" in line
