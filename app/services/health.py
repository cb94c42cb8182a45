"""Readiness: whether the database, the broker, the SparkSession (with executors, on a cluster master) and the
in-process consumer answer."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, exc, text

from app.db.loop_reads import DATABASE_AWAY as LOOP_AWAY
from app.spark.session import spark_alive
from workers import cluster

if TYPE_CHECKING:
    from celery import Celery
    from pyspark.sql import SparkSession

DATABASE_AWAY: tuple[type[Exception], ...] = (exc.OperationalError, exc.InterfaceError, exc.TimeoutError, *LOOP_AWAY)
"""What SQLAlchemy (and psycopg, on the event loop's reads: app/db/loop_reads.py) raise while the database restarts or
cannot be reached: the API answers them 503."""


def readiness_of_database(engine: Engine) -> str:
    """``ok`` when the database answers a query, else ``failed: <why>``."""
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return "ok"
    except Exception as exc:
        return f"failed: {type(exc).__name__}"


def readiness(
    *, engine: Engine, celery: Celery, spark: SparkSession, consumer: Any | None, expect_consumer: bool
) -> dict[str, str]:
    """Each part's state: ``ok``, or ``failed: <why>``."""
    checks: dict[str, str] = {"database": readiness_of_database(engine)}
    try:
        with celery.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        checks["broker"] = "ok"
    except Exception as exc:
        checks["broker"] = f"failed: {type(exc).__name__}"
    checks["spark"] = spark_state(spark)
    if expect_consumer:
        checks["consumer"] = "ok" if consumer is not None and consumer.alive() else "failed: not running"
    return checks


def spark_state(spark: SparkSession) -> str:
    """``ok`` while the SparkContext runs and, on a cluster master, has executors to run tasks on."""
    if not spark_alive(spark):
        return "failed: SparkContext stopped or JVM gone"
    try:
        state = executors_state(cluster.slot_count(spark))
    except Exception as error:  # the JVM went between the two questions
        return f"failed: {type(error).__name__}"
    master = "n/a" if state == "ok" else master_state(str(spark.sparkContext.master))
    return state if master in ("ok", "n/a") else f"{state}; {master}"


def executors_state(slots: cluster.TaskSlots) -> str:
    """A cluster master's session without executors runs no job: its workers or master died (a standalone master
    that restarts does not take the application back), or they are still registering, 10-15 s after start-up. A
    driver is ready once one has, so whoever waits for ``/readyz`` at start waits for executors too. A local
    master runs tasks in the driver. The master is named without its address: ``/readyz`` answers anyone."""
    if slots.local or slots.executors:
        return "ok"
    return (
        f"failed: no executors registered with {cluster.hidden_master(slots.master)}: the cluster's workers or "
        "master are down, or they are still starting"
    )


def master_state(master: str, *, timeout_s: float = 0.5) -> str:
    """A standalone master (``spark://host:port``, or ``spark://h1:p1,h2:p2`` with standby masters): ``ok`` when one
    accepts a TCP connection on its port, else ``unreachable: <why>``; ``n/a`` for other masters. While a standalone
    master is down the driver's jobs go on, on the executors it has (they talk to the driver), but an executor that
    dies is not replaced until the master is back, and Spark says so only in the driver's log ("Disconnected from
    Spark cluster! Waiting for reconnection"). A connection refused is certain; a timeout (``timeout_s``) is said as
    one. The address is not named: readiness answers anyone."""
    if not master.startswith("spark://"):
        return "n/a"
    why = "no address"
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return "ok"
        except (OSError, ValueError) as exc:
            why = "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__
    return (
        f"unreachable: the Spark master {cluster.hidden_master(master)} does not answer ({why}); running jobs go on "
        "on the executors there are, and a lost executor is not replaced until it is back"
    )


def master_reachable(master: str) -> bool | None:
    """``GET /cluster``'s ``master_reachable``: whether a standalone master answers (:func:`master_state`); None for
    masters that are not one (local, yarn, k8s)."""
    state = master_state(master)
    return None if state == "n/a" else state == "ok"
