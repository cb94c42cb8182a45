"""Extra job consumers as their own processes: ``celery -A app.jobs.worker worker``.

Each such process is a Spark driver too: when the worker starts it builds its runtime through the same start-up
path as the API (app/runtime.py: migrated database, its own long-lived SparkSession, the job runtime attached to
this Celery app, and a reconciler of its own, so that it takes over the jobs of any driver that died), and stops it
when the worker stops. Celery's warm shutdown (SIGTERM, or SIGINT) hands the running jobs back at once, as the API
process does (app/jobs/stop.py), so they need not finish before the worker exits. Start the API with
``SPARKTRAIN_IN_PROCESS_CONSUMER=false`` to leave all jobs to these processes. The pool is ``threads`` by
configuration (never prefork: Spark and fork do not mix).

The Celery app is built on first access of ``app`` (PEP 562), not at import.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import Celery, signals

log = logging.getLogger(__name__)
_app: Celery | None = None


def build_worker_app() -> Celery:
    from app.core.settings import load_settings
    from app.jobs.celery_app import create_celery

    settings = load_settings()
    celery = create_celery(settings)
    started: list[Any] = []

    @signals.worker_init.connect(weak=False)
    def _start_runtime(sender: Any = None, **_: Any) -> None:
        from app.runtime import start_runtime

        # Celery's own worker consumes here.
        rt = start_runtime(settings, celery=celery, consume=False)
        started.append(rt)
        log.info("worker runtime ready (Spark application %s)", rt.spark.sparkContext.applicationId)

    @signals.worker_shutting_down.connect(weak=False)
    def _hand_back(sender: Any = None, **_: Any) -> None:
        # Sent from Celery's signal handler: the database and broker work goes to a thread of its own.
        for rt in started:
            threading.Thread(target=rt.begin_stop, name="hand-back", daemon=True).start()

    @signals.worker_shutdown.connect(weak=False)
    def _stop_runtime(sender: Any = None, **_: Any) -> None:
        for rt in started:
            rt.close()

    return celery


def __getattr__(name: str) -> Any:
    global _app  # noqa: PLW0603 (the lazily built app of this module)
    if name in ("app", "celery"):
        if _app is None:
            _app = build_worker_app()
        return _app
    raise AttributeError(name)
