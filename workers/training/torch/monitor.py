"""The driver's end of the training workers' event stream (see ``report.py``).

Runs on the driver next to the blocked ``collect()`` of the barrier stage: it turns step events into job
metrics (batched into one insert every half second), rank 0's plan and steps into progress (at most one database
write every ``PROGRESS_S``, and the first step of every epoch and the last step always), epochs into
validation metrics and log lines, checkpoints into checkpoint rows. When the job is cancelled it tells the
workers to stop at the next step, within ``WATCH_S`` of the cancel (the Spark job group is cancelled as well).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from workers.context import JobContext, MetricPoint
from workers.training.listener import EventListener

log = logging.getLogger(__name__)
STEP_KEYS = (
    "loss",
    "samples_per_s",
    "bytes",
    "wire_bytes",
    "wire_bytes_sent",
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
    "step_events_dropped": "step_events_dropped",
}
"""A worker's figures over the whole run (its last event), as job metrics at the final step: key -> metric."""
FLUSH_S = 0.5
PROGRESS_S = 0.25
"""Rank 0 reports every step; a database write for each was a fifth of a loaded driver's GIL time (bench.load)."""
DRAIN_S = 60.0
"""How long the end of a stage waits for the workers' last events to be handled (a checkpoint's row is written
to the database as its event is handled)."""


class Monitor(EventListener):
    name = "monitor"

    def __init__(
        self,
        ctx: JobContext,
        *,
        host: str,
        on_checkpoint: Callable[..., object],
    ) -> None:
        super().__init__(host, FLUSH_S)
        self.ctx, self.on_checkpoint = ctx, on_checkpoint
        self._points: list[MetricPoint] = []
        self._stop_sent = False
        self.warnings: set[str] = set()
        self.plan: dict[str, Any] = {}
        self.epochs_seen: list[dict[str, Any]] = []
        self._progress_at = -math.inf
        self._progress_epoch = -1

    def __enter__(self) -> Monitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # The stage has ended, so every worker closed its reporter: wait until the events it sent last (the last
        # epoch's checkpoint, its totals) are handled, instead of cutting them off by closing the socket.
        self.close(drain=True, drain_s=DRAIN_S)
        self._flush()

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
                MetricPoint(_debug_key(k), float(v), step=step, epoch=epoch, worker=rank)
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
                + (
                    f"; first threshold {event['initial_threshold']:.3g} (from the planned steps)"
                    if event.get("initial_threshold")
                    else ""
                )
                + (
                    f"; exchanged exactly on every step, no threshold: {4 * event['parameters']:,} bytes of "
                    f"parameters, at most exact_below_bytes {event.get('exact_below_bytes', 0):,}"
                    if event.get("exact")
                    else ""
                )
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
        per_epoch, start_epoch = int(plan["steps_per_epoch"]), int(plan["start_epoch"])
        total = per_epoch * (int(plan["epochs"]) - start_epoch)
        done = step - int(plan["start_step"])
        epoch = start_epoch + 1 + (done - 1) // max(1, per_epoch)
        now = time.monotonic()
        if epoch == self._progress_epoch and done < total and now - self._progress_at < PROGRESS_S:
            return
        self._progress_epoch, self._progress_at = epoch, now
        whole = per_epoch * start_epoch + done  # of the run's epochs, as the message counts them (a resume too)
        fraction = whole / max(1, per_epoch * int(plan["epochs"]))
        self.ctx.progress(0.02 + 0.96 * fraction, f"epoch {epoch} of {plan['epochs']}, step {step}")

    def _flush(self) -> None:
        with self._lock:
            points, self._points = self._points, []
        if points:
            self.ctx.metrics(points)

    def _tick(self) -> None:
        self._flush()

    def _watch(self) -> None:
        if self.ctx.cancelled and not self._stop_sent:
            self.request_stop()

    def request_stop(self) -> None:
        """Ask every worker to stop at its next step."""
        self._stop_sent = True
        self.send_all(b'{"t":"stop"}\n')


def _debug_key(stat: str) -> str:
    """The metric key of an ``encoding_debug`` statistic: magnitudes in units of tau get ``_tau``, the share of
    elements at or above tau (``fraction_ge_tau``) has it already."""
    return f"residual_{stat}" if stat.startswith("fraction") else f"residual_{stat}_tau"
