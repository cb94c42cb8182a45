"""The driver's stop signals (app/__main__.py's DriverServer): a second Ctrl-C exits once the first one's
hand-back of the running jobs is done, wherever it lands. Python runs a signal's handler in the main thread between
any two bytecodes, so a second signal can run its handler inside the first one's: the test calls the handler from
inside the first call as the interpreter would."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from types import SimpleNamespace

import pytest
import uvicorn
from starlette.datastructures import State

import app.__main__ as driver_main
from app.__main__ import DriverServer


class Exited(Exception):
    """``os._exit`` in the main thread."""


def _server(runtime: object) -> DriverServer:
    app = SimpleNamespace(state=SimpleNamespace(runtime=runtime))
    return DriverServer(uvicorn.Config(app, log_config=None), app=app)


def _exits(monkeypatch: pytest.MonkeyPatch, handed: threading.Event) -> list[tuple[int, bool]]:
    exits: list[tuple[int, bool]] = []

    def exit_now(code: int) -> None:
        exits.append((code, handed.is_set()))
        if threading.current_thread() is threading.main_thread():  # a signal handler's: it must not go on
            raise Exited

    monkeypatch.setattr(driver_main.os, "_exit", exit_now)
    monkeypatch.setattr(driver_main.logging, "shutdown", lambda: None)
    return exits


def _wait(exits: list[tuple[int, bool]]) -> None:
    deadline = time.monotonic() + 10
    while not exits and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_second_signal_inside_the_first_ones_handler_waits_for_the_hand_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """CI saw the job of a driver stopped by Ctrl-C twice left RUNNING: the test sent the second signal as soon as
    the driver logged that it got the first, which ran inside the first one's handler before its hand-back thread
    existed; it found no hand-back running and exited at once."""
    handed = threading.Event()
    exits = _exits(monkeypatch, handed)
    warning = driver_main.log.warning

    def second_ctrl_c_as_it_logs(msg: str, *args: object) -> None:
        warning(msg, *args)
        if "stopping" in msg and not server._exiting:
            server.handle_exit(signal.SIGINT, None)

    monkeypatch.setattr(driver_main.log, "warning", second_ctrl_c_as_it_logs)

    def begin_stop() -> None:
        time.sleep(0.3)
        handed.set()

    server = _server(SimpleNamespace(begin_stop=begin_stop))
    server.handle_exit(signal.SIGINT, None)
    _wait(exits)
    assert exits == [(0, True)], "the second signal exited before the running jobs were handed back"


def test_a_second_signal_after_the_hand_back_exits_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    handed = threading.Event()
    exits = _exits(monkeypatch, handed)
    server = _server(SimpleNamespace(begin_stop=handed.set))
    server.handle_exit(signal.SIGTERM, None)
    assert handed.wait(5)
    time.sleep(0.05)  # the hand-back thread sets its own event after begin_stop returned
    with pytest.raises(Exited):
        server.handle_exit(signal.SIGINT, None)
    assert exits == [(0, True)]


def test_a_second_signal_before_the_service_started_exits_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    exits = _exits(monkeypatch, threading.Event())
    server = _server(None)
    server.handle_exit(signal.SIGINT, None)
    with pytest.raises(Exited):
        server.handle_exit(signal.SIGINT, None)
    assert exits == [(0, False)]


def test_a_second_signal_that_lands_as_the_first_one_looks_for_the_runtime_waits_for_the_hand_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first handler reads the runtime from the app's state, Starlette's State, whose ``__getattr__`` is Python
    code: a signal can run its handler there, before the first one knew whether there was anything to hand back.
    It found no hand-back due and exited at once, leaving the running jobs RUNNING."""
    handed = threading.Event()
    exits = _exits(monkeypatch, handed)

    def begin_stop() -> None:
        time.sleep(0.3)
        handed.set()

    class SignalledState(State):
        def __getattr__(self, key: str) -> object:
            if key == "runtime" and not signalled:
                signalled.append(True)
                server.handle_exit(signal.SIGINT, None)  # as the interpreter would run it, inside the lookup
            return super().__getattr__(key)

    signalled: list[bool] = []
    app = SimpleNamespace(state=SignalledState({"runtime": SimpleNamespace(begin_stop=begin_stop)}))
    server = DriverServer(uvicorn.Config(app, log_config=None), app=app)
    with contextlib.suppress(Exited):
        server.handle_exit(signal.SIGINT, None)
    _wait(exits)
    assert signalled and exits == [(0, True)], "the second signal exited before the running jobs were handed back"


def test_a_signal_as_the_driver_finds_spark_lost_is_one_stop_not_a_second_signal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Spark probe's stop and a signal at the same moment (the signal's handler runs inside the probe's log
    call): the probe's stop counted as a second signal, and the process exited by ``os._exit`` once the jobs were
    handed back, without stopping Spark and the consumer, and with status 0 rather than SPARK_LOST_EXIT."""
    import asyncio

    handed = threading.Event()
    exits = _exits(monkeypatch, handed)
    stops: list[bool] = []

    def begin_stop() -> None:
        stops.append(True)
        handed.set()

    runtime = SimpleNamespace(begin_stop=begin_stop, jobs=SimpleNamespace(stopping=False))
    server = _server(runtime)
    error = driver_main.log.error

    def signal_as_it_logs(msg: str, *args: object) -> None:
        error(msg, *args)
        server.handle_exit(signal.SIGTERM, None)  # docker stop, as the probe found the JVM gone

    monkeypatch.setattr(driver_main.log, "error", signal_as_it_logs)

    async def tick() -> None:
        server._probe = asyncio.ensure_future(asyncio.sleep(0, result=False))  # the JVM does not answer
        await asyncio.sleep(0.01)
        await server.on_tick(1)

    asyncio.run(tick())
    assert handed.wait(5)
    time.sleep(0.2)
    assert (stops, exits) == ([True], []), "the process exited at once instead of stopping"
    assert server.should_exit
