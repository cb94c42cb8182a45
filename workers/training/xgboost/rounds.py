"""The driver's end of an xgboost fit's round reports: each boosting round's evaluation, as job metrics while it runs.

Rank 0's training callback (remote.py :func:`~workers.training.xgboost.remote.round_callback`) sends every round's
evaluation as the round ends, newline-delimited JSON over TCP after a hello with a random token, the wire of
workers/training/torch/report.py. :class:`RoundReports` listens, and writes what arrives as job metrics
(``validation_<metric>``, ``train_<metric>``; step = the round) every half second, so ``GET /jobs/{id}/metrics``
shows them while the fit runs and a tune job can prune the trial before it ends.

It remembers which (key, round) it wrote: the history the fit hands back at its end adds only the rounds that did
not arrive (:meth:`RoundReports.missing`), and a round sent twice (a stage attempt run again) is written once.

Driver side: stdlib only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import socket
import socketserver
import threading
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from workers.context import JobContext, MetricPoint
from workers.training.xgboost.remote import ReportTarget

log = logging.getLogger(__name__)
FLUSH_S = 0.5
DRAIN_S = 30.0
"""After a fit that ended well, how long to wait for the events rank 0 sent last (it closed its socket)."""

Key = tuple[str, int]


class RoundReports:
    def __init__(self, ctx: JobContext, host: str) -> None:
        self._ctx = ctx
        self._token = secrets.token_hex(16)
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)
        self._serving = 0
        self._clients: list[socket.socket] = []
        self._pending: dict[Key, MetricPoint] = {}
        self._claimed: set[Key] = set()  # pending or written
        self._written: set[Key] = set()
        self._halt = threading.Event()
        reports = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                reports._serve(self.connection, self.rfile)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server((host, 0), Handler)
        self.target: ReportTarget = (host, int(self._server.server_address[1]), self._token)
        self._threads = [
            threading.Thread(target=self._server.serve_forever, name="xgb-rounds-accept", daemon=True),
            threading.Thread(target=self._flush_loop, name="xgb-rounds-flush", daemon=True),
        ]

    def __enter__(self) -> RoundReports:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._server.shutdown()
        if kind is None:  # rank 0 closed its socket when training ended: read what it sent last
            with self._drained:
                self._drained.wait_for(lambda: self._serving == 0, timeout=DRAIN_S)
        self._halt.set()
        self._server.server_close()
        with self._lock:
            for client in self._clients:
                with contextlib.suppress(OSError):
                    client.shutdown(socket.SHUT_RDWR)
        self._threads[1].join(timeout=FLUSH_S * 4)
        self._flush()

    def missing(self, points: Iterable[MetricPoint]) -> list[MetricPoint]:
        """``points`` less the (key, step) pairs already written, each once."""
        out: dict[Key, MetricPoint] = {}
        with self._lock:
            for p in points:
                if (p.key, p.step) not in self._written:
                    out.setdefault((p.key, p.step), p)
        return list(out.values())

    def _serve(self, conn: socket.socket, rfile: Any) -> None:
        try:
            hello = json.loads(rfile.readline())
        except ValueError:
            return
        if hello.get("t") != "hello" or not secrets.compare_digest(str(hello.get("token", "")), self._token):
            log.warning("xgboost round reports: dropped a connection without the job's token")
            return
        with self._lock:
            self._clients.append(conn)
            self._serving += 1
        try:
            for line in rfile:
                try:
                    self._accept(json.loads(line))
                except Exception:
                    log.exception("xgboost round reports: bad event %r", line[:200])
        except OSError:
            pass  # cut: the task was killed (a cancel), or the driver is stopping
        finally:
            with self._drained:
                self._serving -= 1
                self._drained.notify_all()

    def _accept(self, event: dict[str, Any]) -> None:
        if event.get("t") != "round":
            return
        step = int(event["round"])
        with self._lock:
            for key, value in (event.get("metrics") or {}).items():
                if (key, step) not in self._claimed:
                    self._claimed.add((key, step))
                    self._pending[key, step] = MetricPoint(str(key), float(value), step=step)

    def _flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return
        try:
            self._ctx.metrics(sorted(pending.values(), key=lambda p: (p.step, p.key)))
        except Exception as exc:  # the database is away: tried again on the next flush, else written at the end
            log.warning("job %s: writing %d round metrics failed (%s: %s)", self._ctx.job_id, len(pending),
                        type(exc).__name__, exc)  # fmt: skip
            with self._lock:
                self._pending = {**pending, **self._pending}
            return
        with self._lock:
            self._written.update(pending)

    def _flush_loop(self) -> None:
        while not self._halt.wait(FLUSH_S):
            self._flush()
