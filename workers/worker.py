"""Extra job consumers as their own processes: ``celery -A workers.worker worker``.

Each such process is a Spark driver too: it builds its own long-lived SparkSession when the worker starts and
stops it when the worker stops. Start the API with ``SPARKTRAIN_IN_PROCESS_CONSUMER=false`` to leave all jobs
to these processes. The pool is ``threads`` by configuration (never prefork: Spark and fork do not mix).

The Celery app is built on first access of ``app`` (PEP 562), not at import.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery, signals

log = logging.getLogger(__name__)
_app: Celery | None = None


def build_worker_app() -> Celery:
    from app.core.settings import load_settings
    from workers.celery_app import create_celery

    settings = load_settings()
    celery = create_celery(settings)

    @signals.worker_init.connect(weak=False)
    def _start_runtime(sender: Any = None, **_: Any) -> None:
        from app.db.migrate import upgrade_database
        from app.db.session import create_db_engine, create_sessionmaker
        from app.spark.session import build_spark_session
        from workers.celery_app import attach_runtime
        from workers.runtime import JobRuntime

        engine = create_db_engine(settings.database_url)
        upgrade_database(engine)
        spark = build_spark_session(settings)
        attach_runtime(celery, JobRuntime(settings=settings, db=create_sessionmaker(engine), spark=spark))
        log.info("worker runtime ready (Spark application %s)", spark.sparkContext.applicationId)

    @signals.worker_shutdown.connect(weak=False)
    def _stop_runtime(sender: Any = None, **_: Any) -> None:
        rt = getattr(celery, "sparktrain_runtime", None)
        if rt is not None:
            rt.spark.stop()

    return celery


def __getattr__(name: str) -> Any:
    global _app  # noqa: PLW0603 (the lazily built app of this module)
    if name in ("app", "celery"):
        if _app is None:
            _app = build_worker_app()
        return _app
    raise AttributeError(name)
