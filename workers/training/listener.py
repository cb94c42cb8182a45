"""The driver's end of an event stream from a barrier stage's tasks: newline-delimited JSON over TCP, each
connection opened with a hello carrying the job's random token (the tasks' side: workers/training/torch/report.py).

:class:`EventListener` accepts connections, drops those without the token, hands each event to ``_handle`` and
calls ``_tick`` every ``flush_s`` on a thread of its own (batching database writes), and ``_watch`` every
``WATCH_S`` on the same thread (a cancel reaching the tasks within a step or two, not a flush later). Leaving it
reads the open connections to their end first when asked to (the tasks closed them, so their last events are not
cut off).
Used by the torch monitor (workers/training/torch/monitor.py) and xgboost's round reports
(workers/training/xgboost/rounds.py). Driver side: stdlib only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import socket
import socketserver
import threading
import time
from typing import Any

log = logging.getLogger(__name__)
WATCH_S = 0.05


class EventListener:
    name = "events"
    """For log lines and thread names."""

    def __init__(self, host: str, flush_s: float) -> None:
        self.token = secrets.token_hex(16)
        self._flush_s = flush_s
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)
        self._serving = 0  # connections whose events are still being read and handled
        self._clients: list[socket.socket] = []
        self._halt = threading.Event()
        listener = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                listener._serve(self.connection, self.rfile)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server((host, 0), Handler)
        self.address: tuple[str, int] = (host, int(self._server.server_address[1]))
        self._threads = [
            threading.Thread(target=self._accept_loop, name=f"{self.name}-accept", daemon=True),
            threading.Thread(target=self._tick_loop, name=f"{self.name}-flush", daemon=True),
        ]

    def _accept_loop(self) -> None:
        # socketserver looks for a shutdown request once per poll interval (0.5 s by default) and ``shutdown()``
        # waits for it: every stage's end waited 0.25 s on average for nothing (bench/README.md, fixed overheads).
        self._server.serve_forever(poll_interval=WATCH_S)

    def _handle(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def _tick(self) -> None:
        """Every ``flush_s`` while listening."""

    def _watch(self) -> None:
        """Every ``WATCH_S`` while listening: cheap checks only."""

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def close(self, *, drain: bool, drain_s: float) -> None:
        """Stop accepting; with ``drain``, wait up to ``drain_s`` for the open connections to be read to their end;
        then cut what is left and stop the tick thread."""
        self._server.shutdown()
        if drain:
            with self._drained:
                self._drained.wait_for(lambda: self._serving == 0, timeout=drain_s)
        self._halt.set()
        self._server.server_close()
        with self._lock:
            for client in self._clients:
                with contextlib.suppress(OSError):
                    client.shutdown(socket.SHUT_RDWR)
                client.close()
        self._threads[1].join(timeout=self._flush_s * 4)

    def send_all(self, data: bytes) -> None:
        """``data`` to every connected task."""
        with self._lock:
            for client in self._clients:
                with contextlib.suppress(OSError):
                    client.sendall(data)

    def _serve(self, conn: socket.socket, rfile: Any) -> None:
        try:
            hello = json.loads(rfile.readline())
        except ValueError:
            return
        if hello.get("t") != "hello" or not secrets.compare_digest(str(hello.get("token", "")), self.token):
            log.warning("%s: dropped a connection without the job's token", self.name)
            return
        with self._lock:
            self._clients.append(conn)
            self._serving += 1
        try:
            for line in rfile:
                try:
                    self._handle(json.loads(line))
                except Exception:
                    log.exception("%s: bad event %r", self.name, line[:200])
        except OSError:
            pass  # the connection was cut (a lost or killed task, or the driver stopping)
        finally:
            with self._drained:
                self._serving -= 1
                self._drained.notify_all()

    def _tick_loop(self) -> None:
        due = time.monotonic() + self._flush_s
        while not self._halt.wait(min(WATCH_S, self._flush_s)):
            try:
                self._watch()
                if time.monotonic() >= due:
                    due = time.monotonic() + self._flush_s
                    self._tick()
            except Exception:
                log.exception("%s: flush failed", self.name)
