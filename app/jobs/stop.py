"""A driver told to stop (SIGINT, SIGTERM, a Celery worker's warm shutdown) never fails a user's job.

The first signal takes no new jobs and hands every running job back at once: its attempt ends ``DRIVER_STOPPED``
and it is queued again (a stop costs no attempt; app/services/resume.py), for another driver or this one after its
restart, rather than waiting ``SPARKTRAIN_HEARTBEAT_STALE_S`` for the reconciler. Then the job's stop flag and
Spark job group are cancelled, so its thread unwinds; whatever it raises then is the echo of the stop and is not
recorded (the attempt is no longer its own).

A signal sent to the whole process group (Ctrl-C in a terminal, ``docker stop`` under an init that signals the
group, systemd's default stop) also reaches the JVM, which may then be gone before the Python side stops Spark:
every call into it on the way out tolerates that (``spark_call``, :func:`stop_spark`), and py4j's own complaints
about the broken connection are silenced, so a stop prints no traceback.
"""

from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Any

from app.jobs.runtime import JobRuntime, spark_call, spark_gone_error
from app.services import reconcile

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("sparktrain.jobs")


def quiet_py4j() -> None:
    """py4j logs every broken connection to a JVM that is going away with a traceback (at INFO)."""
    logging.getLogger("py4j").setLevel(logging.CRITICAL)


def hand_back_all(rt: JobRuntime) -> list[dict[str, Any]]:
    """Stop taking jobs here and give every running one back (see the module); returns what was done to each."""
    quiet_py4j()
    done: list[dict[str, Any]] = []
    for running in rt.running.stop():
        outcome: dict[str, Any] | None = None
        if rt.send is not None:
            try:
                outcome = reconcile.hand_back(db=rt.db, send=rt.send, job_id=running.job_id, worker_id=rt.worker_id,
                                              attempt=running.attempt, default_queue=rt.settings.queue)  # fmt: skip
            except Exception as exc:
                log.warning("could not hand job %s back (%s: %s); the reconciler of another driver will, once its "
                            "heartbeat is stale", running.job_id, type(exc).__name__, exc)  # fmt: skip
        if outcome is not None:
            running.handed_back = True
            done.append(outcome)
            log.warning("stopping: job %s attempt %d handed back (%s)", running.job_id, running.attempt,
                        outcome.get("how") or outcome["action"])  # fmt: skip
        running.cancel.set()
        _cancel_group(rt, running.job_id)
    return done


def _cancel_group(rt: JobRuntime, job_id: str) -> None:
    spark_call(lambda: rt.spark.sparkContext.cancelJobGroup(job_id))


def stop_spark(spark: SparkSession) -> None:
    """``spark.stop()``, which finds the JVM gone when the stop signal reached it too: then only the Python side is
    reset, quietly."""
    quiet_py4j()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyspark's "Unable to cleanly shutdown Spark JVM process"
        try:
            spark.stop()
        except Exception as exc:
            if not spark_gone_error(exc):
                log.warning("stopping Spark failed: %s: %s", type(exc).__name__, exc)
            spark.sparkContext._jsc = None
