"""The driver process's long-lived parts and the one way they start: the database engine (migrated), the
SparkSession, the Celery app with the job runtime attached, and, in the API process, the in-process job consumer,
the reconciler and the online-model cache.

Both entry points start here: ``python -m app`` (the app's lifespan calls :func:`start_runtime`) and an external
consumer, ``celery -A app.jobs.worker worker`` (its ``worker_init`` calls it with the worker's own Celery app and
without the in-process consumer, since Celery's worker consumes there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from celery import Celery
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.core.settings import Settings
from app.db.loop_reads import LoopReads
from app.jobs.runtime import JobRuntime
from app.services.quotas import RequestLimiter, unknown_owners
from app.services.resolved_models import ResolvedModels
from workers.inference.cache import ModelCache

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from app.jobs.consumer import InProcessConsumer
    from app.jobs.reconciler import Reconciler

log = logging.getLogger("sparktrain")


@dataclass
class ServiceRuntime:
    settings: Settings
    engine: Engine
    db: sessionmaker[Session]
    spark: SparkSession
    celery: Celery
    jobs: JobRuntime
    consumer: InProcessConsumer | None = None
    reconciler: Reconciler | None = None
    owns_spark: bool = True
    owns_celery: bool = True
    model_cache: ModelCache = field(default_factory=lambda: ModelCache(8))
    resolved_models: ResolvedModels = field(default_factory=ResolvedModels)
    limiter: RequestLimiter | None = None
    reads: sessionmaker[Session] | None = None
    """Sessions for read-only requests (:func:`app.db.session.create_read_sessionmaker`); None: ``db``'s."""
    loop_reads: LoopReads | None = None
    """``GET /jobs/{id}``'s read on the event loop (PostgreSQL only; app/db/loop_reads.py); the service's lifespan
    closes its connections (:meth:`close_loop_reads`)."""
    background: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="sparktrain-after-answer")
    )
    """Work a request leaves for after its answer because it may wait on Spark (a registered dataset's summary,
    app/services/datasets/registry.py), one at a time."""
    _closed: bool = field(default=False, repr=False)

    def after_answer(self, work: Callable[[], object], what: str) -> Future[object]:
        """Run ``work`` on the background thread; a failure is logged (``what`` names it), never raised."""

        def run() -> object:
            try:
                return work()
            except Exception as exc:
                log.warning("%s failed: %s: %s", what, type(exc).__name__, exc)
                return None

        return self.background.submit(run)

    def enqueue(self, task_name: str, job_id: str) -> None:
        """Send a new job's message on this driver's queue; raises if the broker does not take it within a few
        seconds."""
        self.send(task_name, job_id, self.settings.queue)

    def send(self, task_name: str, job_id: str, queue: str) -> None:
        """Send a job's message on ``queue`` (a retry goes where its job was first sent)."""
        from app.jobs.celery_app import send_job

        send_job(self.celery, task_name, job_id, queue)

    def begin_stop(self) -> list[dict[str, Any]]:
        """The first stop signal: take no new jobs and hand every running one back at once (app/jobs/stop.py).
        Returns what was done to each; :meth:`close` finishes the stop."""
        from app.jobs.stop import hand_back_all

        if self.consumer is not None:
            self.consumer.stop_taking()
        if self.reconciler is not None:
            self.reconciler.stop(wait=False)
        return hand_back_all(self.jobs, quiet=self.owns_spark)

    @property
    def read_sessions(self) -> sessionmaker[Session]:
        """The sessions a read-only request uses: :attr:`reads`, else :attr:`db`'s."""
        return self.reads if self.reads is not None else self.db

    async def close_loop_reads(self) -> None:
        """Close the event loop's database connections, on that loop (before :meth:`close`)."""
        if self.loop_reads is not None:
            await self.loop_reads.close()

    def close(self) -> None:
        """Stop everything; never raises (a failed shutdown is an operator's page of tracebacks)."""
        from app.jobs.stop import stop_spark

        if self.reconciler is not None:
            self.reconciler.stop()
        if self._closed:
            return
        self._closed = True
        if not self.jobs.stopping:  # a shutdown that no signal began (an embedding app, a test's server)
            self.begin_stop()
        grace = self.settings.stop_grace_s if self.jobs.stopping else 30.0
        consumer = self.consumer
        steps: list[tuple[str, Callable[[], object]]] = [
            ("the work left for after answers", lambda: self.background.shutdown(wait=False, cancel_futures=True)),
            ("the database engine", self.engine.dispose),
        ]
        if self.owns_spark:
            steps.insert(0, ("Spark", lambda: stop_spark(self.spark)))
        if self.owns_celery:
            steps.insert(0, ("Celery", self.celery.close))
        steps.insert(0, ("the tune jobs", lambda: self._join_detached(grace)))
        if consumer is not None:
            steps.insert(0, ("the job consumer", lambda: consumer.stop(grace)))
        for what, step in steps:
            try:
                step()
            except Exception as exc:
                log.warning("stopping %s failed: %s: %s", what, type(exc).__name__, exc)

    def _join_detached(self, timeout: float) -> None:
        """Runs that left their consumer thread (tune jobs) end with the consumer's (they were handed back too)."""
        left = self.jobs.detached.join(timeout)
        if left:
            log.warning("jobs %s still running after %.0f s; leaving them to end with the process", left, timeout)


def start_runtime(
    settings: Settings,
    *,
    spark: SparkSession | None = None,
    celery: Celery | None = None,
    consume: bool | None = None,
    reconcile: bool = True,
) -> ServiceRuntime:
    """Build everything in order: schema first (jobs need it), then Spark (slow), then start consuming.

    ``spark`` shares an existing SparkSession (tests: one per process is all Spark allows); ``celery`` attaches the
    job runtime to an existing Celery app (the external worker's); ``consume`` starts the in-process consumer
    (default: ``settings.in_process_consumer``); ``reconcile`` runs the reconciler's thread."""
    from app.db.migrate import upgrade_database
    from app.db.session import create_db_engine, create_read_sessionmaker, create_sessionmaker
    from app.jobs.celery_app import attach_runtime, create_celery
    from app.jobs.reconciler import Reconciler
    from app.jobs.stop import jvm_in_its_own_session
    from app.spark.session import build_spark_session

    settings.var_dir.mkdir(parents=True, exist_ok=True)
    settings.artifact_root.mkdir(parents=True, exist_ok=True)
    own_data = (settings.var_dir / "data").resolve()  # the default data root: where a newcomer's own files go
    if own_data in settings.data_roots:
        own_data.mkdir(parents=True, exist_ok=True)
    engine = create_db_engine(settings.database_url)
    upgrade_database(engine, heartbeat_stale_s=settings.heartbeat_stale_s)  # refuses while an older release runs
    db = create_sessionmaker(engine)
    owns_spark, owns_celery = spark is None, celery is None
    if spark is None:
        log.info("starting Spark (master %s): usually 10 to 60 s", settings.spark_master)
        with jvm_in_its_own_session():
            spark = build_spark_session(settings)
    celery = celery or create_celery(settings)
    job_runtime = JobRuntime(settings=settings, db=db, spark=spark)
    attach_runtime(celery, job_runtime)
    from app.jobs.lost_messages import is_redis

    redis = settings.broker_url if is_redis(settings.broker_url) else None
    rt = ServiceRuntime(
        settings=settings,
        engine=engine,
        db=db,
        reads=create_read_sessionmaker(engine),
        loop_reads=LoopReads(settings.database_url) if LoopReads.supports(settings.database_url) else None,
        spark=spark,
        celery=celery,
        jobs=job_runtime,
        owns_spark=owns_spark,
        owns_celery=owns_celery,
        model_cache=ModelCache(settings.model_cache_size),
        limiter=RequestLimiter(db=db, redis_url=redis),
    )
    job_runtime.send = rt.send
    if settings.in_process_consumer if consume is None else consume:
        _start_consumer(rt)
    if reconcile:
        rt.reconciler = Reconciler(settings=settings, db=db, send=rt.send)
        rt.reconciler.start()
        _read_pending_datasets(rt)
    for line in unknown_owners(settings):  # a misspelt owner: its quota holds nobody
        log.warning(line)
    log.info(
        "driver %s ready: database %s, broker %s, Spark %s (%s), in-process consumer %s, %s",
        job_runtime.worker_id,
        settings.redacted_url(settings.database_url),
        settings.redacted_url(settings.broker_url),
        spark.sparkContext.master,
        spark.sparkContext.applicationId,
        "on" if rt.consumer else "off",
        f"{len(settings.api_keys)} API key(s)"
        if settings.api_keys
        else "no API keys (SPARKTRAIN_API_KEYS): every request is allowed, as one owner",
    )
    return rt


def _read_pending_datasets(rt: ServiceRuntime) -> None:
    """Registrations whose summary a stopped driver left ``pending`` are read on the background thread."""
    from app.services.datasets.registry import read_pending

    def read() -> None:
        if read_pending(db=rt.db, spark=rt.spark, stopping=lambda: rt.jobs.stopping):
            log.info("read the summaries of the registrations left pending by a driver that stopped")

    rt.after_answer(read, "reading the pending dataset summaries")


def _start_consumer(rt: ServiceRuntime) -> None:
    from app.jobs.celery_app import restore_unacked_embedded
    from app.jobs.consumer import InProcessConsumer

    restored = restore_unacked_embedded(rt.settings.broker_url)
    if restored:
        log.warning("%d job messages taken by a process that died were made visible again", restored)
    rt.consumer = InProcessConsumer(rt.celery, concurrency=rt.settings.consumer_concurrency, queue=rt.settings.queue)
    try:
        rt.consumer.start()
    except Exception:
        rt.close()
        raise
