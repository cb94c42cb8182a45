"""The driver's end of the training workers' event stream (see ``report.py``).

Runs on the driver next to the blocked ``collect()`` of the barrier stage: it turns step events into job
metrics (batched into one insert every half second), rank 0's plan and steps into progress, epochs into
validation metrics and log lines, checkpoints into checkpoint rows. When the job is cancelled it tells the
workers to stop at the next step (the Spark job group is cancelled as well).
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import socket
import socketserver
import threading
from collections.abc import Callable
from typing import Any

from workers.context import JobContext, MetricPoint

log = logging.getLogger(__name__)
STEP_KEYS = (
    "loss",
    "samples_per_s",
    "bytes",
    "wire_bytes",
    "dense_bytes",
    "tau",
    "sparsity",
    "residual_norm",
    "clipped_mass",
    "collective",
    "phase_data_ms",
    "phase_compute_ms",
    "phase_encode_ms",
    "phase_exchange_ms",
    "phase_apply_ms",
)
TOTAL_KEYS = {
    "codec_compression": "codec_compression",
    "wire_compression": "wire_compression",
    "wire_bytes_per_step": "wire_bytes_per_step",
    "wire_bytes_total": "wire_bytes_total",
    "clipped_mass": "clipped_mass_total",
    "dense_steps": "dense_steps",
}
"""A worker's figures over the whole run (its last event), as job metrics at the final step: key -> metric."""
FLUSH_S = 0.5
DRAIN_S = 60.0
"""How long the end of a stage waits for the workers' last events to be handled (a checkpoint's row is written
to the database as its event is handled)."""


class Monitor:
    def __init__(
        self,
        ctx: JobContext,
        *,
        host: str,
        on_checkpoint: Callable[..., object],
    ) -> None:
        self.ctx, self.on_checkpoint = ctx, on_checkpoint
        self.token = secrets.token_hex(16)
        self._lock = threading.Lock()
        self._points: list[MetricPoint] = []
        self._clients: list[socket.socket] = []
        self._halt = threading.Event()
        self._serving = 0  # connections whose events are still being read and handled
        self._drained = threading.Condition(self._lock)
        self._stop_sent = False
        self.warnings: set[str] = set()
        self.plan: dict[str, Any] = {}
        self.epochs_seen: list[dict[str, Any]] = []
        monitor = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                monitor._serve(self.connection, self.rfile)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server((host, 0), Handler)
        self.address: tuple[str, int] = (host, int(self._server.server_address[1]))
        self._threads = [
            threading.Thread(target=self._server.serve_forever, name="monitor-accept", daemon=True),
            threading.Thread(target=self._flush_loop, name="monitor-flush", daemon=True),
        ]

    def __enter__(self) -> Monitor:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()  # no new connections; the open ones are read to their end below
        with self._drained:
            # The stage has ended, so every worker closed its reporter: wait until the events it sent last (the
            # last epoch's checkpoint, its totals) are handled, instead of cutting them off by closing the socket.
            self._drained.wait_for(lambda: self._serving == 0, timeout=DRAIN_S)
        self._halt.set()
        self._server.server_close()
        with self._lock:
            for client in self._clients:
                client.close()
        self._flush()

    def _serve(self, conn: socket.socket, rfile: Any) -> None:
        hello = rfile.readline()
        try:
            first = json.loads(hello)
        except ValueError:
            return
        if first.get("t") != "hello" or not secrets.compare_digest(str(first.get("token", "")), self.token):
            log.warning("monitor: dropped a connection without the job's token")
            return
        with self._lock:
            self._clients.append(conn)
            self._serving += 1
        try:
            for line in rfile:
                try:
                    self._handle(json.loads(line))
                except Exception:
                    log.exception("monitor: bad event %r", line[:200])
        except OSError:
            pass  # the connection was cut (a lost worker, or the driver stopping)
        finally:
            with self._drained:
                self._serving -= 1
                self._drained.notify_all()

    def _handle(self, event: dict[str, Any]) -> None:
        kind = event.get("t")
        if kind == "step":
            rank, step, epoch = int(event["rank"]), int(event["step"]), int(event["epoch"])
            points = [
                MetricPoint(key, float(event[key]), step=step, epoch=epoch, worker=rank)
                for key in STEP_KEYS
                if event.get(key) is not None
            ]
            points += [
                MetricPoint(f"residual_{k}_tau", float(v), step=step, epoch=epoch, worker=rank)
                for k, v in (event.get("debug") or {}).items()
            ]
            with self._lock:
                self._points.extend(points)
            if rank == 0 and self.plan:
                self._progress(step)
        elif kind == "totals":
            rank, step = int(event["rank"]), int(event["step"])
            self.ctx.metrics(
                MetricPoint(metric, float(event[key]), step=step, worker=rank)
                for key, metric in TOTAL_KEYS.items()
                if event.get(key) is not None
            )
        elif kind == "plan":
            self.plan = event
            self.ctx.log(
                f"{event['parameters']:,} parameters; {event['steps_per_epoch']} steps per epoch per worker; "
                f"epochs {event['start_epoch'] + 1}..{event['epochs']}"
            )
        elif kind == "epoch":
            self.epochs_seen.append(event)
            validation = event.get("validation") or {}
            self.ctx.metrics(
                MetricPoint(f"validation_{k}", float(v), step=int(event["step"]), epoch=int(event["epoch"]))
                for k, v in validation.items()
            )
            shown = ", ".join(f"{k} {v:.4f}" for k, v in validation.items())
            same = "" if event.get("replicas_identical") else "; WARNING: replicas differ"
            self.ctx.log(f"epoch {event['epoch']} done at step {event['step']}: validation {shown}{same}")
        elif kind == "checkpoint":
            self.on_checkpoint(int(event["epoch"]), int(event["step"]), str(event["path"]), event.get("metrics") or {},
                               keep_epoch=event.get("keep_epoch"))  # fmt: skip
        elif kind == "warn":
            message = str(event.get("msg"))
            if message not in self.warnings:
                self.warnings.add(message)
                self.ctx.warn(message)

    def _progress(self, step: int) -> None:
        plan = self.plan
        start = int(plan["start_step"])
        total = int(plan["steps_per_epoch"]) * (int(plan["epochs"]) - int(plan["start_epoch"]))
        done = step - start
        epoch = int(plan["start_epoch"]) + 1 + (done - 1) // max(1, int(plan["steps_per_epoch"]))
        self.ctx.progress(0.02 + 0.96 * done / max(1, total), f"epoch {epoch} of {plan['epochs']}, step {step}")

    def _flush(self) -> None:
        with self._lock:
            points, self._points = self._points, []
        if points:
            self.ctx.metrics(points)

    def _flush_loop(self) -> None:
        while not self._halt.wait(FLUSH_S):
            try:
                self._flush()
                if self.ctx.cancelled and not self._stop_sent:
                    self.request_stop()
            except Exception:
                log.exception("monitor: flush failed")

    def request_stop(self) -> None:
        """Ask every worker to stop at its next step."""
        self._stop_sent = True
        data = b'{"t":"stop"}\n'
        with self._lock:
            for client in self._clients:
                with contextlib.suppress(OSError):
                    client.sendall(data)
