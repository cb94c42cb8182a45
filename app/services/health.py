"""Readiness: whether the database, the broker, the SparkSession and the in-process consumer answer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, exc, text

from app.db.loop_reads import DATABASE_AWAY as LOOP_AWAY
from app.spark.session import spark_alive

if TYPE_CHECKING:
    from celery import Celery
    from pyspark.sql import SparkSession

DATABASE_AWAY: tuple[type[Exception], ...] = (exc.OperationalError, exc.InterfaceError, exc.TimeoutError, *LOOP_AWAY)
"""What SQLAlchemy (and psycopg, on the event loop's reads: app/db/loop_reads.py) raise while the database restarts or
cannot be reached: the API answers them 503."""


def readiness(
    *, engine: Engine, celery: Celery, spark: SparkSession, consumer: Any | None, expect_consumer: bool
) -> dict[str, str]:
    """Each part's state: ``ok``, or ``failed: <why>``."""
    checks: dict[str, str] = {}
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"failed: {type(exc).__name__}"
    try:
        with celery.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        checks["broker"] = "ok"
    except Exception as exc:
        checks["broker"] = f"failed: {type(exc).__name__}"
    checks["spark"] = "ok" if spark_alive(spark) else "failed: SparkContext stopped or JVM gone"
    if expect_consumer:
        checks["consumer"] = "ok" if consumer is not None and consumer.alive() else "failed: not running"
    return checks
