"""``python -m app [--host H] [--port P]``: start the driver process (API + in-process job consumer).

Stopping (docs/architecture.md#stopping-a-driver): the first SIGINT or SIGTERM stops taking jobs and hands the
running ones back at once (they are queued again, for another driver or this one after its restart), then the
server and Spark stop and the process exits with status 0, without a traceback, also when the signal reached the
whole process group and with it Spark's JVM. A second signal exits at once, once the first one's hand-back is done
(at most 5 s); a third exits at once whatever remains.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn
from pydantic import ValidationError

from app.core.errors import message
from app.core.logging import configure_logging
from app.core.settings import Settings, load_settings
from app.core.variables import unknown_variables
from app.spark.jvm_watch import JVM_DIED
from app.spark.session import SPARK_LOST_EXIT, SPARK_LOST_LOG, SPARK_PROBE_S, spark_alive

log = logging.getLogger("sparktrain")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class DriverServer(uvicorn.Server):
    """uvicorn's server with the driver's stop: the first signal also hands the running jobs back (in a thread, at
    once, not after the HTTP connections drained), a second one exits, and the signal is not raised again when the
    server is done (uvicorn re-raises it, which makes SIGINT end in a KeyboardInterrupt traceback and SIGTERM in
    status 143)."""

    def __init__(self, config: uvicorn.Config, *, app: Any) -> None:
        super().__init__(config)
        self.app = app
        self.spark_lost = False
        self._probe: asyncio.Task[bool] | None = None
        self._signalled = False
        self._hand_back_due = False
        self._handed_back = threading.Event()
        """Set once the first stop's hand-back is done, or at once when there was nothing to hand back."""
        self._exiting = False

    async def on_tick(self, counter: int) -> bool:
        """uvicorn's tick (every 0.1 s), and every 5 s whether Spark's JVM still answers: one that died on its own
        (killed, out of memory) leaves a driver that can run no job, yet kept taking them from the queue and losing
        them. It stops as for a signal (its jobs are handed back), and exits with :data:`SPARK_LOST_EXIT` so that a
        supervisor (``restart:`` in docker-compose.yml, systemd's ``Restart=``) starts it again with a new JVM. A
        call into the JVM that found it dead (``JVM_DIED``, app/spark/jvm_watch.py) makes it ask at the next tick."""
        should_exit = await super().on_tick(counter)
        if self._probe is not None and self._probe.done():
            alive, self._probe = self._probe.result(), None
            runtime = getattr(self.app.state, "runtime", None)
            if not alive and not self.should_exit and runtime is not None and not runtime.jobs.stopping:
                log.error(SPARK_LOST_LOG, "driver")
                self.spark_lost = True
                self.handle_exit(signal.SIGTERM, None, signalled=False)
        elif self._probe is None and (counter % round(SPARK_PROBE_S * 10) == 0 or JVM_DIED.is_set()):  # tick: 0.1 s
            runtime = getattr(self.app.state, "runtime", None)
            if runtime is not None and not runtime.jobs.stopping:  # in a thread: a hung JVM must not hang the loop
                self._probe = asyncio.ensure_future(asyncio.to_thread(spark_alive, runtime.spark))
        return should_exit or self.should_exit

    def handle_exit(self, sig: int, frame: FrameType | None, *, signalled: bool = True) -> None:
        """A stop signal's handler; ``signalled=False``: the Spark probe's stop, which is never a second signal."""
        # Marked before anything else: a second signal can run its handler inside this one (Python checks for
        # signals between any two bytecodes), and it must find the first one already counted.
        second, self._signalled = self._signalled, True
        self.should_exit = True
        if second:
            if not signalled:  # Spark was found lost as a signal came (its handler ran in the probe's log call)
                return
            if self._exiting:  # a third signal: now, whatever remains (no logging: it may have interrupted a log call)
                os.write(2, b"another stop signal: exiting now\n")
                os._exit(0)
            if self._handed_back.is_set():  # not before the first one decided: it may not have got that far
                log.warning("second stop signal: exiting now")
                logging.shutdown()
                os._exit(0)
            # Ctrl-C twice: the jobs are being handed back (~0.1 s), which a job left RUNNING would wait for its
            # heartbeat to go stale for. Waited for on a thread, not in this handler, which may have interrupted
            # the main thread inside a lock the hand-back needs (logging's), or inside the first signal's handler
            # before its hand-back thread ran (CI: a second Ctrl-C 0-50 ms after the first left the job RUNNING)
            self._exiting = True
            threading.Thread(target=_exit_after, args=(self._handed_back,), name="exit", daemon=True).start()
            return
        runtime = getattr(self.app.state, "runtime", None)  # Python code (Starlette's State): a signal can land in it
        self._hand_back_due = runtime is not None
        if runtime is None:  # nothing to hand back: a second signal exits at once
            self._handed_back.set()
        if not self.spark_lost:  # then SPARK_LOST_LOG said it all: no signal came
            log.warning("%s: stopping; running jobs are handed back, a second signal exits once they are",
                        signal.Signals(sig).name)  # fmt: skip
        if runtime is not None:
            done = self._handed_back
            threading.Thread(target=_hand_back, args=(runtime, done), name="hand-back", daemon=True).start()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if sockets is not None and self.started:  # uvicorn names its address only for the sockets it opened itself
            self._log_started_message(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _hand_back(runtime: Any, done: threading.Event) -> None:
    """The first stop signal's hand-back of the running jobs (``begin_stop``); ``done`` is set once it ended."""
    try:
        runtime.begin_stop()
    finally:
        done.set()


def _exit_after(handed_back: threading.Event) -> None:
    """The second stop signal's exit: once the first one's hand-back is done (at most :data:`HAND_BACK_WAIT_S`)."""
    log.warning("second stop signal: exiting once the running jobs are handed back (at most %g s)", HAND_BACK_WAIT_S)
    handed_back.wait(HAND_BACK_WAIT_S)
    logging.shutdown()
    os._exit(0)


HAND_BACK_WAIT_S = 5.0
"""How long a second stop signal waits for the first one's hand-back of the running jobs before exiting."""
DATABASE_AWAY_EXIT = 3  # uvicorn's status for a failed start-up, which is what this was before the probe
PORT_TAKEN_EXIT = 5  # it cannot listen on its host and port (in use, not an address of this machine, privileged)
SPARK_AWAY_EXIT = 6  # no Spark master answers at SPARKTRAIN_SPARK_MASTER, or the SparkSession could not be built


def listen(host: str, port: int, backlog: int = 2048) -> list[socket.socket]:
    """The driver's listening sockets, opened as asyncio's ``create_server`` (uvicorn's) opens them: one per address
    ``host`` names, ``SO_REUSEADDR`` (a restart finds its old connections in TIME_WAIT), IPv6 ones IPv6-only. They
    listen at once, so nothing can take the port while the driver starts, and requests that come early wait for it
    instead of being refused. Raises OSError (``socket.gaierror`` for a host that does not resolve)."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def cannot_listen(host: str, port: int, exc: OSError) -> str:
    """The one line ``python -m app`` exits with when it cannot listen on ``host:port``."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (f"sparktrain cannot start: {where} is already in use (another driver or program listens there); "
                "stop it or choose another port with SPARKTRAIN_PORT or --port")  # fmt: skip
    reason = exc.strerror or str(exc)
    return (f"sparktrain cannot start: it cannot listen on {where} ({reason}); choose another address with "
            "SPARKTRAIN_HOST or --host and SPARKTRAIN_PORT or --port")  # fmt: skip


def database_problem(settings: Settings, timeout_s: int = 10) -> str | None:
    """Why the database at ``settings.database_url`` cannot be used (its URL shown without any password, and what
    to do), or None. SQLite files are created on demand and never unreachable."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import DBAPIError

    parsed = make_url(settings.database_url)
    shown = settings.redacted_url(settings.database_url)
    sqlite = parsed.get_backend_name() == "sqlite"
    if sqlite and (not parsed.database or parsed.database == ":memory:" or not Path(parsed.database).exists()):
        return None
    try:
        engine = create_engine(parsed, **({} if sqlite else {"connect_args": {"connect_timeout": timeout_s}}))
    except ImportError as exc:  # a dialect SQLAlchemy knows whose driver package is not installed (mysql://)
        return (f"the database driver for {shown} is not installed ({exc}); install it into the service's "
                "environment, or point SPARKTRAIN_DATABASE_URL at PostgreSQL (postgresql+psycopg://...) or "
                "SQLite")  # fmt: skip
    try:
        with engine.connect() as conn:  # one connection: reachable, a schema this release knows, no older release
            newer = _newer_schema(conn)  # running on one it would migrate
            older = None if newer else _older_drivers(conn, settings.heartbeat_stale_s, shown)
    except DBAPIError as exc:
        if sqlite:  # a file, never unreachable: the start-up's own opening says what is wrong with it
            return None
        reason = str(exc.orig or exc).strip().splitlines()[0]
        if "does not exist" in reason:  # the server runs: the database or the role is missing
            return (f"the database cannot be used: {shown}: {reason}\nCreate it (createdb, CREATE ROLE), or point "
                    "SPARKTRAIN_DATABASE_URL at one that exists; the driver creates its tables itself.")  # fmt: skip
        return (f"the database is unreachable: {shown}: {reason}\nStart it, check its address and credentials, or "
                "point SPARKTRAIN_DATABASE_URL at one that runs.")  # fmt: skip
    except Exception:  # a driver this probe does not know how to ask (connect_timeout): the start-up will say
        return None
    finally:
        engine.dispose()
    if newer is None:
        return older
    return (f"the database {shown} was migrated by a newer sparktrain (its schema revision {newer[0]}; this release's "
            f"newest is {newer[1]}).\nRun the release that migrated it (every driver on one database runs the same "
            "release), or restore the database from before that upgrade.")  # fmt: skip


def _older_drivers(conn: Any, heartbeat_stale_s: float, shown: str) -> str | None:
    """Drivers of an older release still running jobs on a database this release would migrate (two lines), or
    None. The migration asks again under its lock (a traceback then); asked here first, it is two lines."""
    from app.db.migrate import older_drivers_problem

    try:
        return older_drivers_problem(conn, heartbeat_stale_s, database=shown)
    except Exception:
        return None


def _newer_schema(conn: Any) -> tuple[str, str] | None:
    """A database migrated by a newer release (its revision, this release's newest): this one cannot use it and must
    not try (alembic's traceback). Any other error is not this probe's to report: the start-up's migration says it."""
    from app.db.migrate import newer_revision

    try:
        return newer_revision(conn)
    except Exception:
        return None


def broker_problem(settings: Settings, timeout_s: int = 10) -> str | None:
    """Why the broker at ``settings.broker_url`` cannot be reached (shown without its password), or None. The
    embedded broker is a file, created on demand. Asked before uvicorn starts: a consumer that could not connect
    ended the start-up after 60 s with a traceback."""
    if settings.embedded_broker:
        return None
    from kombu import Connection

    shown = settings.redacted_url(settings.broker_url)
    try:
        with Connection(settings.broker_url, connect_timeout=timeout_s) as connection:
            connection.ensure_connection(max_retries=1, timeout=timeout_s)
    except Exception as exc:  # redis's ConnectionError, AuthenticationError, ...: whatever kombu raises
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return (f"the job broker cannot be used: {shown}: {reason}\nStart it, check its address, password and "
                "options, or point SPARKTRAIN_BROKER_URL at one that runs (empty: the embedded one).")  # fmt: skip
    return None


def spark_master_problem(settings: Settings, timeout_s: float = 3) -> str | None:
    """Why none of the masters a ``spark://h1:p1,h2:p2`` URL names can be reached (the reason for each), or None;
    other masters are not asked. Spark itself tried for over a minute (3 registrations of 20 s), then ended the
    start-up with a page of tracebacks about "a stopped SparkContext"."""
    master = settings.spark_master
    if not master.startswith("spark://"):
        return None
    reasons = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():  # not host:port: Spark says what it expects
            return None
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return None
        except TimeoutError:
            reason = f"no answer within {timeout_s:g} s"
        except OSError as exc:
            reason = (exc.strerror or str(exc) or type(exc).__name__).lower()
        reasons.append(f"{address}: {reason}" if "," in master else reason)
    return (f"it cannot reach the Spark master {master} ({'; '.join(reasons)})\nStart it (on this machine: "
            "scripts/cluster.sh start), or point SPARKTRAIN_SPARK_MASTER at one that runs.")  # fmt: skip


class SparkStart:
    """The app as uvicorn runs it, with a start-up whose SparkSession could not be built told in one line
    (:meth:`failed`) instead of Starlette's traceback of a py4j or pyspark error, which said only "Cannot call
    methods on a stopped SparkContext" after ~100 lines. Any other failed start-up keeps its traceback."""

    def __init__(self, app: Any, master: str) -> None:
        self.app, self.master = app, master
        self.failure: BaseException | None = None
        inner = app.router.lifespan_context

        @contextlib.asynccontextmanager
        async def lifespan(app: Any) -> AsyncIterator[Any]:
            started = False
            try:
                async with inner(app) as state:
                    started = True
                    yield state
            except Exception as exc:
                if not started and type(exc).__module__.split(".")[0] in ("py4j", "pyspark"):
                    self.failure = exc
                raise

        app.router.lifespan_context = lifespan

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def told(message: Any) -> None:
            if message["type"] == "lifespan.startup.failed" and self.failure is not None:
                message = {**message, "message": ""}  # uvicorn logs a non-empty one: the traceback
            await send(message)

        await self.app(scope, receive, told if scope["type"] == "lifespan" else send)

    def failed(self) -> str:
        """The one line ``python -m app`` exits with after :attr:`failure`."""
        java = getattr(self.failure, "java_exception", None)
        text = str(java.toString()) if java is not None else str(self.failure)
        reason = (text.strip().splitlines() or [type(self.failure).__name__])[0].rstrip(".")
        if "stopped SparkContext" in reason:  # Spark stopped it: its own log lines above say why
            reason = "Spark stopped it while starting (no Spark master there accepted the application)"
        return (f"sparktrain cannot start: Spark did not start with master {self.master} (SPARKTRAIN_SPARK_MASTER): "
                f"{reason}; Spark's own lines above say more")  # fmt: skip


def _line(loc: tuple[int | str, ...], words: str) -> str:
    """An error of Settings, led by the environment variable it is about (``SPARKTRAIN_PORT: ...``) unless its
    words already start with one."""
    variable = f"SPARKTRAIN_{str(loc[0]).upper()}" if loc else "settings"
    return words if words.startswith((variable, "SPARKTRAIN_")) else f"{variable}: {words}"


def _every_error(exc: ValidationError, overrides: dict[str, Any]) -> list[Any]:
    """The settings' errors, and those of the checks across settings (``Settings._fill_defaults``), which pydantic
    runs only once every field parsed: made again with the fields in error left at their defaults, so that one start
    names every wrong setting (``SPARKTRAIN_PORT=abc SPARKTRAIN_HEARTBEAT_STALE_S=1`` named the port only)."""
    errors = list(exc.errors())
    bad = {str(e["loc"][0]) for e in errors if e.get("loc")}
    if not bad:  # the checks across settings failed alone: they are all here already
        return errors
    saved = {name: os.environ.pop(name) for name in [f"SPARKTRAIN_{b.upper()}" for b in bad] if name in os.environ}
    try:  # nothing else runs yet: the process's environment is this thread's
        load_settings(**{k: v for k, v in overrides.items() if k not in bad})
    except ValidationError as more:
        errors += [e for e in more.errors() if not e.get("loc") or str(e["loc"][0]) not in bad]
    except Exception:  # the first errors are what matters
        pass
    finally:
        os.environ.update(saved)
    return errors


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app", description="Start the sparktrain driver process.")
    parser.add_argument("--host", help="interface to listen on (default SPARKTRAIN_HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default SPARKTRAIN_PORT or 8000)")
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in {"host": args.host, "port": args.port}.items() if v is not None}
    unknown = unknown_variables(os.environ)  # a misspelt setting may be why another one is wrong
    try:
        settings = load_settings(**overrides)
    except ValidationError as exc:
        lines = [f"  {_line(e['loc'], message(e, show_input=False))}" for e in _every_error(exc, overrides)] + [
            f"  {line}" for line in unknown
        ]
        sys.exit("sparktrain cannot start, a setting is wrong:\n" + "\n".join(lines))
    problem = database_problem(settings) or broker_problem(settings)
    if problem is not None:  # before uvicorn, whose failed start-up prints a page of traceback
        print(f"sparktrain cannot start: {problem}", file=sys.stderr)
        sys.exit(DATABASE_AWAY_EXIT)
    problem = spark_master_problem(settings)
    if problem is not None:
        print(f"sparktrain cannot start: {problem}", file=sys.stderr)
        sys.exit(SPARK_AWAY_EXIT)
    try:  # before Spark, the consumer and the broker's restore: a second driver on a taken port touches nothing
        sockets = listen(settings.host, settings.port)
    except OSError as exc:
        print(cannot_listen(settings.host, settings.port, exc), file=sys.stderr)
        sys.exit(PORT_TAKEN_EXIT)
    configure_logging(level=settings.log_level, fmt=settings.log_format)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines carry tracebacks of closed connections
    for line in unknown:
        logging.getLogger("sparktrain").warning(line)

    from app.main import create_app

    app = create_app(settings)
    started = SparkStart(app, settings.spark_master)
    config = uvicorn.Config(
        started,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        # uvicorn's loggers go to the root handler: JSON lines, or "time level logger: message" as every line
        log_config=None,  # its loggers reach the root handler: "time level logger: message" or JSON, as every line
        timeout_graceful_shutdown=30,
        proxy_headers=False,  # uvicorn's default trusts X-Forwarded-For from 127.0.0.1: any local client chose it
    )
    server = DriverServer(config, app=app)
    try:
        server.run(sockets=sockets)
    except SystemExit:  # uvicorn's for a failed start-up
        if started.failure is None:
            raise
        print(started.failed(), file=sys.stderr)
        sys.exit(SPARK_AWAY_EXIT)
    if server._hand_back_due:  # on a daemon thread: the process must not end before the jobs are handed back
        server._handed_back.wait(HAND_BACK_WAIT_S)
    runtime = getattr(app.state, "runtime", None)
    if runtime is not None:  # a signal during start-up: uvicorn skips the shutdown of what already started
        runtime.begin_stop()
        runtime.close()
    if server.spark_lost:
        sys.exit(SPARK_LOST_EXIT)


if __name__ == "__main__":
    main()
