"""Extra job consumers as their own processes: ``celery -A app.jobs.worker worker``.

Each such process is a Spark driver too: when the worker starts it builds its runtime through the same start-up
path as the API (app/runtime.py: migrated database, its own long-lived SparkSession, the job runtime attached to
this Celery app, and a reconciler of its own, so that it takes over the jobs of any driver that died), and stops it
when the worker stops. Celery's warm shutdown (SIGTERM, or SIGINT) hands the running jobs back at once, as the API
process does (app/jobs/stop.py), so they need not finish before the worker exits. Start the API with
``SPARKTRAIN_IN_PROCESS_CONSUMER=false`` to leave all jobs to these processes. The pool is ``threads`` by
configuration (never prefork: Spark and fork do not mix). A worker whose Spark JVM dies stops and exits with status
4, as ``python -m app`` does.

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
    from app.core.logging import quiet_requeues
    from app.core.settings import load_settings
    from app.jobs.celery_app import create_celery

    quiet_requeues()  # a message put back by a stopping worker is not a failure (app/core/logging.py)
    # as python -m app: py4j's INFO lines are each connection's opening and closing, and when the JVM dies a traceback
    # of every connection it broke, before the one line that says so (app/spark/jvm_watch.py)
    logging.getLogger("py4j").setLevel(logging.WARNING)
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
        threading.Thread(target=_watch_spark, args=(rt, sender), name="spark-probe", daemon=True).start()

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


def _watch_spark(rt: Any, hostname: Any) -> None:
    """A worker whose Spark JVM died (killed, out of memory) can run no job, yet its consumer kept taking them
    (each handed back at once, app/jobs/celery_app.py). As ``python -m app`` does (app/__main__.py), it stops as
    for a signal, its running jobs handed back, and exits with SPARK_LOST_EXIT so that a supervisor restarts it."""
    from celery.worker import state

    from app.spark.jvm_watch import JVM_DIED
    from app.spark.session import SPARK_LOST_EXIT, SPARK_LOST_LOG, SPARK_PROBE_S, spark_alive

    def stopping() -> bool:  # Celery's own flags are set first on a signal; the runtime's once it hands back
        return rt.jobs.stopping or state.should_stop not in (None, False) or state.should_terminate not in (None, False)

    while not stopping():
        JVM_DIED.wait(SPARK_PROBE_S)  # at once when a call into the JVM found it dead (app/spark/jvm_watch.py)
        if stopping() or spark_alive(rt.spark):  # a hung JVM blocks here: the worker then stays, as it did
            continue
        log.error(SPARK_LOST_LOG, "worker")
        signals.worker_shutting_down.send(sender=hostname, sig="SPARK_LOST", how="Warm", exitcode=SPARK_LOST_EXIT)
        state.should_stop = SPARK_LOST_EXIT  # what Celery's own signal handler sets: a warm shutdown, this status
        return


def __getattr__(name: str) -> Any:
    global _app  # noqa: PLW0603 (the lazily built app of this module)
    if name in ("app", "celery"):
        if _app is None:
            _app = build_worker_app()
        return _app
    raise AttributeError(name)
