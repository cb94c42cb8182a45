"""How training workers talk to the driver while a barrier stage runs: newline-delimited JSON over TCP.

Workers send events (plan, step, epoch, checkpoint, warn); the driver may send ``{"t": "stop"}``. The first
line a worker sends carries the job's random token; the driver drops connections without it.
Executor-side: stdlib only.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from typing import Any, Protocol


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
    def __init__(self, host: str, port: int, token: str, rank: int, timeout_s: float = 30.0) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout_s)
        self._sock.settimeout(None)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._file = self._sock.makefile("rwb", buffering=65536)
        self._closed = False
        self.send({"t": "hello", "token": token, "rank": rank})
        self._reader = threading.Thread(target=self._read, name="driver-events", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for line in self._file:
                if json.loads(line).get("t") == "stop":
                    self._stop.set()
        except (OSError, ValueError):
            return

    def send(self, event: dict[str, Any]) -> None:
        data = (json.dumps(event, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._closed:
                return
            try:
                self._file.write(data)
                self._file.flush()
            except OSError:
                self._closed = True  # the driver went away; training goes on, Spark decides its fate

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
