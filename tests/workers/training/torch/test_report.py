"""A worker's event stream never makes training wait for the driver: when the driver does not read, step events
are dropped and counted, and every other event still arrives, in order, once it reads again."""

from __future__ import annotations

import json
import socket
import threading

from workers.training.torch.report import SocketReporter


def test_a_driver_that_does_not_read_drops_step_events_but_never_the_others() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    host, port = server.getsockname()[:2]
    start_reading = threading.Event()
    received: list[dict[str, object]] = []

    def driver() -> None:
        conn, _ = server.accept()
        start_reading.wait(120)
        with conn, conn.makefile("rb") as lines:
            received.extend(json.loads(line) for line in lines)

    reading = threading.Thread(target=driver, daemon=True)
    reading.start()
    reporter = SocketReporter(host, port, "token", 0, capacity=256)
    padding = "x" * 300

    def train() -> None:  # far more than the socket's buffers and the queue hold
        for step in range(1, 60_001):
            reporter.send({"t": "step", "rank": 0, "step": step, "pad": padding})

    training = threading.Thread(target=train, daemon=True)
    training.start()
    training.join(120)
    assert not training.is_alive(), "training waited for a driver that does not read"
    assert reporter.dropped > 0

    start_reading.set()
    reporter.send({"t": "epoch", "rank": 0, "epoch": 1, "step": 60_000})
    reporter.send({"t": "totals", "rank": 0, "step": 60_000, "step_events_dropped": reporter.dropped})
    reporter.close()
    reading.join(60)
    server.close()

    kinds = [event["t"] for event in received]
    assert kinds[0] == "hello" and kinds[-2:] == ["epoch", "totals"], kinds[-3:]
    steps = [int(str(event["step"])) for event in received if event["t"] == "step"]
    assert steps == sorted(steps) and len(set(steps)) == len(steps), "in order, none twice"
    assert len(steps) + reporter.dropped == 60_000
