"""The driver process's long-lived parts, started once in the app's lifespan and stopped at its end:
database engine (migrated), SparkSession, Celery app and, by default, the in-process job consumer."""

from __future__ import annotations

import logging
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
        """Send a job message; raises if the broker does not take it within a few seconds."""
        self.celery.send_task(
            task_name,
            args=[job_id],
            queue=self.settings.queue,
            retry=True,
            retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5},
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.consumer is not None:
            self.consumer.stop()
        self.celery.close()
        if self.owns_spark:
            self.spark.stop()
        self.engine.dispose()


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
