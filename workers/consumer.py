"""A Celery consumer (threads pool) that runs inside the driver process, next to the API and the SparkSession.

Spark and fork do not mix, so never prefork. The WorkController runs on a background thread, as Celery's own
embedded test worker does; the process's signal handling stays with uvicorn.
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import Any

from celery import Celery
from celery.worker import WorkController
from celery.worker import state as worker_state

log = logging.getLogger(__name__)


class _Controller(WorkController):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.ready = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: Any) -> None:
        self.ready.set()


class InProcessConsumer:
    def __init__(self, app: Celery, *, concurrency: int, queue: str, name: str = "driver") -> None:
        self._app = app
        self._controller: _Controller | None = None
        self._thread: threading.Thread | None = None
        self._concurrency = concurrency
        self._queue = queue
        self.hostname = f"{name}@{socket.gethostname()}"

    def start(self, timeout: float = 60.0) -> None:
        self._app.finalize()
        # The threads pool traces tasks against Celery's *default* app: make it ours (one consumer per process).
        self._app.set_current()
        self._app.set_default()
        controller = _Controller(
            app=self._app,
            hostname=self.hostname,
            pool="threads",
            concurrency=self._concurrency,
            queues=[self._queue],
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
            loglevel=logging.WARNING,
        )
        self._controller = controller
        self._thread = threading.Thread(target=controller.start, name="celery-consumer", daemon=True)
        self._thread.start()
        if not controller.ready.wait(timeout):
            raise RuntimeError(f"the job consumer did not connect to the broker within {timeout:.0f} s")
        log.info("job consumer ready: %s, %d threads, queue %s", self.hostname, self._concurrency, self._queue)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 30.0) -> None:
        """Warm shutdown: take no new messages, let running jobs finish for up to ``timeout`` seconds."""
        if self._controller is None or self._thread is None:
            return
        worker_state.should_stop = 0
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("job consumer still busy after %.0f s; leaving it to exit with the process", timeout)
        worker_state.should_stop = None
        self._controller = None
