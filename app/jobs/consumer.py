"""A Celery consumer (threads pool) that runs inside the driver process, next to the API and the SparkSession.

Spark and fork do not mix, so never prefork. The WorkController runs on a background thread, as Celery's own
embedded test worker does; the process's signal handling stays with uvicorn.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

from celery import Celery
from celery.worker import WorkController

log = logging.getLogger(__name__)


class _Controller(WorkController):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.ready = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: Any) -> None:
        self.ready.set()


class InProcessConsumer:
    """At most one per process: Celery's worker machinery (the default app the pool traces tasks against, its
    task-lookup caches) is process-global, so a second consumer would run the first one's jobs with the wrong
    runtime. Starting a second one while one runs raises."""

    _active: InProcessConsumer | None = None
    _active_lock = threading.Lock()

    def __init__(self, app: Celery, *, concurrency: int, queue: str, name: str = "driver") -> None:
        self._app = app
        self._controller: _Controller | None = None
        self._thread: threading.Thread | None = None
        self._stopper: threading.Thread | None = None
        self._concurrency = concurrency
        self._queue = queue
        self.hostname = f"{name}@{socket.gethostname()}"

    def start(self, timeout: float = 60.0) -> None:
        with InProcessConsumer._active_lock:
            if InProcessConsumer._active is not None:
                raise RuntimeError("a job consumer already runs in this process; Celery allows one per process")
            InProcessConsumer._active = self
        try:
            self._start(timeout)
        except BaseException:
            with InProcessConsumer._active_lock:
                InProcessConsumer._active = None
            raise

    def _start(self, timeout: float) -> None:
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

    def stop_taking(self) -> None:
        """Begin a warm shutdown without waiting: the consumer takes no new messages (within one broker poll) and the
        pool lets running tasks end. :meth:`stop` waits for it."""
        controller = self._controller
        if controller is None or self._stopper is not None:
            return
        self._stopper = threading.Thread(target=controller.stop, name="celery-consumer-stop", daemon=True)
        self._stopper.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Warm shutdown of this consumer only: take no new messages, let running jobs finish for up to
        ``timeout`` seconds (then leave them to end with the process; their messages are not acknowledged)."""
        thread, controller = self._thread, self._controller
        if controller is None or thread is None:
            return
        deadline = time.monotonic() + timeout
        self.stop_taking()
        stopper = self._stopper
        assert stopper is not None
        stopper.join(timeout)
        self._controller = None
        # the consumer loop notices within one broker poll (up to ~2 s)
        thread.join(max(3.0, deadline - time.monotonic()))
        if stopper.is_alive() or thread.is_alive():
            _no_restore_at_exit(controller)
            log.info("job consumer: a job thread is still unwinding after %.0f s (SPARKTRAIN_STOP_GRACE_S); its job "
                     "was handed back, so the driver goes on stopping without it", timeout)  # fmt: skip
        with InProcessConsumer._active_lock:
            if InProcessConsumer._active is self:
                InProcessConsumer._active = None


def _no_restore_at_exit(controller: WorkController) -> None:
    """The messages a consumer that did not stop in time still holds are those of jobs it runs, each handed back
    already with a message of its own (app/jobs/stop.py). kombu puts such held messages back on the queue when the
    process exits (``QoS.restore_unacked_once``, a multiprocessing finalizer): on a channel the stop had half closed
    it printed "Restoring 1 unacknowledged message(s)" and an AttributeError traceback, and at best it made a
    duplicate delivery, which the job's state guard drops. Told not to: a held message stays with the broker (a
    hidden row of the embedded broker is made visible at its next start, Redis's after its visibility timeout) and
    is dropped the same way when it comes back."""
    task_consumer = getattr(getattr(controller, "consumer", None), "task_consumer", None)
    qos = getattr(getattr(task_consumer, "channel", None), "qos", None)  # kombu's virtual transports: Redis, SQL
    if qos is not None and hasattr(qos, "restore_at_shutdown"):
        qos.restore_at_shutdown = False
