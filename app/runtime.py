"""The driver process's long-lived parts, started once in the app's lifespan and stopped at its end:
database engine (migrated), SparkSession, Celery app and, by default, the in-process job consumer."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from celery import Celery
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.core.settings import Settings
from workers.inference.cache import ModelCache
from workers.runtime import JobRuntime

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from workers.consumer import InProcessConsumer

log = logging.getLogger("sparktrain")


def _resolved_models() -> Any:
    from app.services.inference import ResolvedModels

    return ResolvedModels()


@dataclass
class ServiceRuntime:
    settings: Settings
    engine: Engine
    db: sessionmaker[Session]
    spark: SparkSession
    celery: Celery
    jobs: JobRuntime
    consumer: InProcessConsumer | None = None
    owns_spark: bool = True
    model_cache: ModelCache = field(default_factory=lambda: ModelCache(8))
    resolved_models: Any = field(default_factory=_resolved_models)
    _closed: bool = field(default=False, repr=False)

    def enqueue(self, task_name: str, job_id: str) -> None:
        """Send a new job's message on this driver's queue; raises if the broker does not take it within a few
        seconds."""
        self.send(task_name, job_id, self.settings.queue)

    def send(self, task_name: str, job_id: str, queue: str) -> None:
        """Send a job's message on ``queue`` (a retry goes where its job was first sent)."""
        from workers.celery_app import send_job

        send_job(self.celery, task_name, job_id, queue)

    reconciler: Reconciler | None = None

    def close(self) -> None:
        if self.reconciler is not None:
            self.reconciler.stop()
        if self._closed:
            return
        self._closed = True
        if self.consumer is not None:
            self.consumer.stop()
        self.celery.close()
        if self.owns_spark:
            self.spark.stop()
        self.engine.dispose()


class Reconciler:
    """Fails (and where possible retries) jobs whose driver died: once at start-up, then every
    ``reconcile_interval_s`` (app/services/reconcile.py)."""

    def __init__(self, rt: ServiceRuntime) -> None:
        self._rt = rt
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reconciler", daemon=True)

    def start(self) -> None:
        self.run_once()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def run_once(self) -> list[dict[str, Any]]:
        from app.services.reconcile import reconcile

        try:
            actions = reconcile(
                db=self._rt.db,
                send=self._rt.send,
                stale_after_s=self._rt.settings.heartbeat_stale_s,
                default_queue=self._rt.settings.queue,
            )
        except Exception:
            log.exception("the reconciler's pass failed")
            return []
        for action in actions:
            log.warning("reconciler: job %s %s", action["job_id"], action["action"])
        return actions

    def _run(self) -> None:
        while not self._stop.wait(self._rt.settings.reconcile_interval_s):
            self.run_once()


def start_runtime(settings: Settings, *, spark: SparkSession | None = None) -> ServiceRuntime:
    """Build everything in order: schema first (jobs need it), then Spark (slow), then start consuming.
    ``spark`` lets a test session share one SparkSession (one per process is all Spark allows)."""
    from app.db.migrate import upgrade_database
    from app.db.session import create_db_engine, create_sessionmaker
    from app.spark.session import build_spark_session
    from workers.celery_app import attach_runtime, create_celery

    settings.var_dir.mkdir(parents=True, exist_ok=True)
    settings.artifact_root.mkdir(parents=True, exist_ok=True)
    engine = create_db_engine(settings.database_url)
    upgrade_database(engine)
    db = create_sessionmaker(engine)
    owns_spark = spark is None
    spark = spark or build_spark_session(settings)
    celery = create_celery(settings)
    job_runtime = JobRuntime(settings=settings, db=db, spark=spark)
    attach_runtime(celery, job_runtime)
    rt = ServiceRuntime(
        settings=settings,
        engine=engine,
        db=db,
        spark=spark,
        celery=celery,
        jobs=job_runtime,
        owns_spark=owns_spark,
        model_cache=ModelCache(settings.model_cache_size),
    )
    if settings.in_process_consumer:
        from workers.celery_app import restore_unacked_embedded
        from workers.consumer import InProcessConsumer

        restored = restore_unacked_embedded(settings.broker_url)
        if restored:
            log.warning("%d job messages taken by a process that died were made visible again", restored)

        rt.consumer = InProcessConsumer(celery, concurrency=settings.consumer_concurrency, queue=settings.queue)
        try:
            rt.consumer.start()
        except Exception:
            rt.close()
            raise
    rt.reconciler = Reconciler(rt)
    rt.reconciler.start()
    log.info(
        "driver %s ready: database %s, broker %s, Spark %s (%s), in-process consumer %s",
        job_runtime.worker_id,
        settings.redacted_url(settings.database_url),
        settings.redacted_url(settings.broker_url),
        spark.sparkContext.master,
        spark.sparkContext.applicationId,
        "on" if rt.consumer else "off",
    )
    return rt
