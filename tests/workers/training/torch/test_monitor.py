"""The driver's end of the workers' event stream turns wire, codec and clipping figures into job metrics."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

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
        reporter.send({**step, "wire_bytes": 120, "dense_bytes": 4000, "clipped_mass": 0.25, "collective": 1})
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
