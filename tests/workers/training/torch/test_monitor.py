"""The driver's end of the workers' event stream turns wire, codec and clipping figures into job metrics."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import pytest

from workers.context import MetricPoint
from workers.training.torch.monitor import Monitor
from workers.training.torch.report import SocketReporter


class _Recorded:
    """The part of a JobContext the monitor writes to, kept in lists."""

    cancelled = False

    def __init__(self) -> None:
        self.points: list[MetricPoint] = []

    def metrics(self, points: Iterable[MetricPoint]) -> None:
        self.points.extend(points)

    def progress(self, fraction: float, message: str | None = None) -> None: ...

    def log(self, message: str, level: str = "INFO") -> None: ...

    def warn(self, message: str) -> None: ...


def test_step_and_totals_events_become_metrics_per_worker() -> None:
    ctx = _Recorded()
    with Monitor(ctx, host="127.0.0.1", on_checkpoint=lambda *a, **k: None) as monitor:  # type: ignore[arg-type]
        host, port = monitor.address
        reporter = SocketReporter(host, port, monitor.token, 1)
        step: dict[str, Any] = {"t": "step", "rank": 1, "epoch": 1, "step": 5, "loss": 0.5, "bytes": 40}
        debug = {"mean": 0.5, "p99_9": 2.0, "max": 4.0, "fraction_ge_tau": 0.01}  # encoding_debug
        reporter.send({**step, "wire_bytes": 120, "dense_bytes": 4000, "clipped_mass": 0.25, "collective": 1,
                       "debug": debug})  # fmt: skip
        reporter.send(
            {
                "t": "totals",
                "rank": 1,
                "step": 10,
                "codec_compression": 100.0,
                "wire_compression": 30.0,
                "wire_bytes_per_step": 133.0,
                "wire_bytes_total": 2000,
                "clipped_mass": 1.5,
                "dense_steps": 3,
            }
        )
        reporter.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(p.key == "wire_compression" for p in ctx.points):
            time.sleep(0.05)
    found = {(p.key, p.step, p.worker): p.value for p in ctx.points}
    assert found[("wire_bytes", 5, 1)] == 120
    assert found[("bytes", 5, 1)] == 40
    assert found[("clipped_mass", 5, 1)] == 0.25
    assert found[("codec_compression", 10, 1)] == 100.0
    assert found[("wire_compression", 10, 1)] == 30.0
    assert found[("wire_bytes_per_step", 10, 1)] == 133.0
    assert found[("clipped_mass_total", 10, 1)] == 1.5
    assert found[("wire_bytes_total", 10, 1)] == 2000
    assert found[("collective", 5, 1)] == 1  # this step all-reduced the decoded sum
    assert found[("dense_steps", 10, 1)] == 3
    debug_keys = sorted(k for k, step, _ in found if k.startswith("residual_") and step == 5)
    assert debug_keys == ["residual_fraction_ge_tau", "residual_max_tau", "residual_mean_tau", "residual_p99_9_tau"]


class _Progress(_Recorded):
    def __init__(self) -> None:
        super().__init__()
        self.progressed: list[tuple[float, str | None]] = []

    def progress(self, fraction: float, message: str | None = None) -> None:
        self.progressed.append((fraction, message))


def test_progress_is_written_at_most_every_quarter_second_but_every_epoch_and_the_end() -> None:
    """Rank 0 reports every step; each was a database write. Now: the first step of every epoch, the last step, and
    at most one more every PROGRESS_S."""
    ctx = _Progress()
    monitor = Monitor(ctx, host="127.0.0.1", on_checkpoint=lambda *a, **k: None)  # type: ignore[arg-type]
    monitor._handle({"t": "plan", "parameters": 10, "steps_per_epoch": 100, "start_epoch": 0, "epochs": 2,
                     "start_step": 0})  # fmt: skip
    for step in range(1, 201):  # two epochs of steps, much faster than PROGRESS_S
        monitor._handle({"t": "step", "rank": 0, "epoch": 1 + (step - 1) // 100, "step": step, "loss": 0.1})
    messages = [m for _, m in ctx.progressed]
    assert messages[0] == "epoch 1 of 2, step 1"
    assert "epoch 2 of 2, step 101" in messages, "the first step of an epoch is always written"
    assert messages[-1] == "epoch 2 of 2, step 200" and ctx.progressed[-1][0] == 0.98, "and the last one"
    assert len(messages) <= 5, messages
    monitor._flush()


class _Logged(_Recorded):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def log(self, message: str, level: str = "INFO") -> None:
        self.lines.append(message)


def test_the_plan_line_names_the_first_threshold_the_trainer_picked() -> None:
    ctx = _Logged()
    monitor = Monitor(ctx, host="127.0.0.1", on_checkpoint=lambda *a, **k: None)  # type: ignore[arg-type]
    plan = {
        "t": "plan",
        "parameters": 9_700_000,
        "steps_per_epoch": 22,
        "start_epoch": 0,
        "epochs": 20,
        "start_step": 0,
    }
    monitor._handle({**plan, "initial_threshold": 0.0032})
    monitor._handle({**plan, "initial_threshold": None})  # given in the request, or a resumed run
    head = "9,700,000 parameters; 22 steps per epoch per worker; epochs 1..20"
    assert ctx.lines == [f"{head}; first threshold 0.0032 (from the planned steps)", head]
    ctx.lines.clear()  # a small model in gradient_sharing mode: the line says it is not thresholded
    monitor._handle({**plan, "parameters": 4835, "initial_threshold": None, "exact": True, "exact_below_bytes": 32768})
    (line,) = ctx.lines
    assert line == ("4,835 parameters; 22 steps per epoch per worker; epochs 1..20; exchanged exactly on every step, "
                    "no threshold: 19,340 bytes of parameters, at most exact_below_bytes 32,768")  # fmt: skip
    monitor._flush()


def test_a_resumed_runs_progress_counts_the_epochs_its_message_counts() -> None:
    """Resumed from epoch 10 of 30, it said "epoch 13 of 30" at 0.116 (the share of the epochs left) and the console
    showed "12% · epoch 13 of 30" (walkthrough): the fraction is of the run's epochs, as the message is."""
    ctx = _Progress()
    monitor = Monitor(ctx, host="127.0.0.1", on_checkpoint=lambda *a, **k: None)  # type: ignore[arg-type]
    monitor._handle({"t": "plan", "parameters": 10, "steps_per_epoch": 100, "start_epoch": 10, "epochs": 30,
                     "start_step": 1000})  # fmt: skip
    monitor._handle({"t": "step", "rank": 0, "epoch": 13, "step": 1250, "loss": 0.1})
    fraction, message = ctx.progressed[-1]
    assert message == "epoch 13 of 30, step 1250"
    assert fraction == pytest.approx(0.02 + 0.96 * 12.5 / 30)  # 12.5 of the 30 epochs done
    monitor._handle({"t": "step", "rank": 0, "epoch": 30, "step": 3000, "loss": 0.1})
    assert ctx.progressed[-1] == (pytest.approx(0.98), "epoch 30 of 30, step 3000")
    monitor._flush()
