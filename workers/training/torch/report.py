"""How training workers talk to the driver while a barrier stage runs: newline-delimited JSON over TCP.

Workers send events (plan, step, epoch, checkpoint, warn); the driver may send ``{"t": "stop"}``. The first
line a worker sends carries the job's random token; the driver drops connections without it.

Training never waits for the driver's step figures: a thread of its own writes the events, and when the driver
reads more slowly than the steps come (a busy driver, a slow database) the queue fills and new step events are
dropped and counted (``dropped``, reported in the worker's totals as ``step_events_dropped``). Every other event
(plan, epoch, checkpoint, warn, totals) waits for room: they are few, and the job's record needs them. Before, a
driver writing every step's progress to its database under HTTP load slowed two trainings 3x (bench.load).
Executor-side: stdlib only.
"""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
from typing import Any, Protocol

QUEUE_EVENTS = 4096
"""Events waiting for the driver; past this, step events are dropped (a few seconds of steps)."""
CLOSE_S = 30.0
"""How long closing waits for the queued events to be written."""


class Reporter(Protocol):
    def send(self, event: dict[str, Any]) -> None: ...

    @property
    def stop_requested(self) -> bool: ...

    def close(self) -> None: ...


class NullReporter:
    """No driver to talk to (unit tests, the GPU check): events are kept in memory."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.stop = threading.Event()

    def send(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    @property
    def stop_requested(self) -> bool:
        return self.stop.is_set()

    def close(self) -> None:
        return None


class SocketReporter:
    def __init__(
        self, host: str, port: int, token: str, rank: int, timeout_s: float = 30.0, capacity: int = QUEUE_EVENTS
    ) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout_s)
        self._sock.settimeout(None)
        self._stop = threading.Event()
        self._file = self._sock.makefile("rwb", buffering=65536)
        self._closed = False
        self._queue: queue.Queue[bytes | None] = queue.Queue(capacity)
        self.dropped = 0
        """Step events dropped because the driver read more slowly than they came."""
        self._write(_line({"t": "hello", "token": token, "rank": rank}))
        self._reader = threading.Thread(target=self._read, name="driver-events", daemon=True)
        self._reader.start()
        self._writer = threading.Thread(target=self._drain, name="driver-events-out", daemon=True)
        self._writer.start()

    def _read(self) -> None:
        try:
            for line in self._file:
                if json.loads(line).get("t") == "stop":
                    self._stop.set()
        except (OSError, ValueError):
            return

    def _write(self, data: bytes) -> None:
        try:
            self._file.write(data)
            self._file.flush()
        except (OSError, ValueError):
            self._closed = True  # the driver went away; training goes on, Spark decides its fate

    def _drain(self) -> None:
        while (data := self._queue.get()) is not None:
            if not self._closed:
                self._write(data)

    def send(self, event: dict[str, Any]) -> None:
        if self._closed:
            return
        data = _line(event)
        if event.get("t") != "step":
            self._queue.put(data)
            return
        try:
            self._queue.put_nowait(data)
        except queue.Full:
            self.dropped += 1

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        """Write what is queued (for up to ``CLOSE_S``), then close."""
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=CLOSE_S)
        self._writer.join(CLOSE_S)
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


def _line(event: dict[str, Any]) -> bytes:
    return (json.dumps(event, separators=(",", ":")) + "\n").encode()
