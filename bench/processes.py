"""Processes the benchmarks and the slow tests start and break: a Redis server and a PostgreSQL server of their own
(restartable without touching anybody else's), a fresh database on the shared PostgreSQL, and ``python -m app``
as a child process, with helpers to find the processes under it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.common import REPO, free_port

PG_SERVER = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
PG_BIN = Path(os.environ.get("BENCH_PG_BIN", "/usr/lib/postgresql/15/bin"))
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


# --- services of our own ---------------------------------------------------------------------------------


class RedisServer:
    """A ``redis-server`` of our own on a free port that persists every write (AOF, ``appendfsync always``):
    kill it and start it again without touching anybody else's Redis."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
                "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no"]  # fmt: skip
        log = (self.directory / "redis.log").open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self.ping():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start (see {self.directory})")
            time.sleep(0.05)

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)
        self.proc = None

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill(signal.SIGTERM)


class PgServer:
    """A PostgreSQL server of our own (``initdb`` into ``directory``, trust authentication, port ``port``), to stop
    and start again in the middle of a job without touching the shared one. Run as the ``postgres`` user when
    started by root (PostgreSQL refuses to run as root)."""

    def __init__(self, directory: Path | None = None, port: int | None = None) -> None:
        # its own directory under the temporary root: the postgres user must reach it (pytest's are root's alone)
        self.directory = directory or Path(tempfile.mkdtemp(prefix="sparktrain-pg-"))
        self.port = port or free_port()
        self.data = self.directory / "data"

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of its ``sparktrain`` database."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/sparktrain"

    def _run(self, *args: str, timeout: float = 120) -> None:
        command = [str(PG_BIN / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        run = subprocess.run(command, capture_output=True, text=True, timeout=timeout, start_new_session=True,
                             check=False)  # fmt: skip
        if run.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({run.returncode}): {run.stderr[-2000:]}")

    def init(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self.start()
        import psycopg

        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE sparktrain")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.directory / "pg.log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """``fast``: disconnect every client at once (a restart as operators do it); ``immediate``: a crash."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def __enter__(self) -> PgServer:
        self.init()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(RuntimeError):
            self.stop("immediate")
        shutil.rmtree(self.directory, ignore_errors=True)


@contextlib.contextmanager
def pg_database(server: str = PG_SERVER) -> Iterator[str]:
    """A fresh PostgreSQL database on ``server`` (a libpq URL without a database); yields its SQLAlchemy URL."""
    import psycopg

    name = f"sparktrain_chaos_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server.replace('postgresql://', 'postgresql+psycopg://', 1)}/{name}"
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- the driver as a process -----------------------------------------------------------------------------


def driver_env(work: Path, **settings: str) -> dict[str, str]:
    """The environment of a ``python -m app`` under ``work``: Spark local[2] on the loopback, the UI off, and
    ``settings`` as ``SPARKTRAIN_<NAME>`` variables (``database_url=...`` -> ``SPARKTRAIN_DATABASE_URL``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKTRAIN_")}
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        SPARKTRAIN_VAR_DIR=str(work / "var"),
        SPARKTRAIN_ARTIFACT_ROOT=str(work / "artifacts"),
        SPARKTRAIN_SPARK_MASTER="local[2]",
        SPARKTRAIN_SPARK_CONF=json.dumps({"spark.ui.enabled": "false"}),
    )
    env.update({f"SPARKTRAIN_{k.upper()}": v for k, v in settings.items()})
    return env


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def descendants(pid: int) -> list[int]:
    kids, out, todo = _children(), [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def cpu_ticks(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def python_workers(root: int) -> list[int]:
    """The Python workers Spark forked for its tasks under process ``root`` (a driver, or a process with a local
    SparkSession): ``pyspark.daemon`` processes whose parent is a ``pyspark.daemon``."""
    tree = descendants(root)
    daemons = {p for p in tree if "pyspark.daemon" in cmdline(p)}
    kids = _children()
    return sorted(c for d in daemons for c in kids.get(d, []) if c in daemons)


def busiest(pids: list[int], sample_s: float = 1.0) -> int:
    """The process of ``pids`` that used the most CPU over ``sample_s`` (a barrier task that is training)."""
    before = {p: cpu_ticks(p) for p in pids}
    time.sleep(sample_s)
    used = {p: cpu_ticks(p) - before[p] for p in pids if alive(p)}
    if not used:
        raise RuntimeError("none of the processes is alive")
    return max(used, key=lambda p: used[p])


class Driver:
    """``python -m app`` as a child process (its own session) with the settings in ``env``."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env, self.log = env, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.client = httpx.Client(timeout=30)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 300) -> Driver:
        port = free_port()
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "app", "--port", str(port)], cwd=REPO, env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the driver exited with {self.proc.returncode}: {self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if self.client.get("/readyz").status_code == 200:
                    return self
            if time.monotonic() > deadline:
                raise RuntimeError(f"the driver was not ready within {timeout:.0f} s: {self.tail()}")
            time.sleep(0.3)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def kill(self, wait_s: float = 60) -> float:
        """SIGKILL the driver process alone (no goodbye); returns the time of the kill (``time.time()``). Waits
        until its Spark JVM and Python workers, which notice their parent is gone, have exited too."""
        assert self.proc is not None
        tree = descendants(self.proc.pid)
        self.proc.kill()
        when = time.time()
        self.proc.wait(30)
        self.client.close()
        deadline = time.monotonic() + wait_s
        while left := [p for p in tree if alive(p)]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes of the killed driver still run after {wait_s:.0f} s: {left}")
            time.sleep(0.2)
        return when

    def stop(self, timeout: float = 90) -> None:
        """SIGTERM (graceful: uvicorn, the consumer and Spark shut down); SIGKILL of its group if that hangs."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.client.close()

    def wait_job(self, job_id: str, timeout: float = 600, statuses: tuple[str, ...] = FINAL) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            job: dict[str, Any] = self.client.get(f"/jobs/{job_id}").json()
            if job["status"] in statuses:
                return job
            if time.monotonic() > deadline:
                raise RuntimeError(f"job {job_id} did not reach {statuses} in {timeout:.0f} s: {job}")
            time.sleep(0.3)
