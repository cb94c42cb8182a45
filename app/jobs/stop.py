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

import contextlib
import logging
import os
import socketserver
import sys
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from app.core.logging import job_scope
from app.jobs.runtime import JobRuntime, RunningJob, spark_call, spark_gone_error
from app.services import reconcile

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("sparktrain.jobs")


class _NotFromPy4J(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return f"{os.sep}py4j{os.sep}" not in record.pathname


def quiet_py4j() -> None:
    """A stop breaks connections on purpose: py4j logs each broken connection to a JVM that is going away with a
    traceback (partly on its own loggers, partly on the root logger), and socket servers on the driver that Spark's
    Python workers talk to (pyspark's accumulator server, the torch trainer's monitor) print one when a worker that
    got the signal too goes away. Silence them for the rest of the stop."""
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    root = logging.getLogger()
    if not any(isinstance(f, _NotFromPy4J) for f in root.filters):
        root.addFilter(_NotFromPy4J())
    socketserver.BaseServer.handle_error = _closed_by_the_stop  # type: ignore[method-assign]


def _closed_by_the_stop(self: socketserver.BaseServer, request: Any, client_address: Any) -> None:
    log.debug("stopping: a connection from %s ended (%s)", client_address, sys.exc_info()[1])


@contextlib.contextmanager
def jvm_in_its_own_session() -> Iterator[None]:
    """Start Spark's JVM (the py4j gateway pyspark launches) in a session of its own, so that a signal sent to the
    driver's process group (Ctrl-C, ``kill -TERM -<pgid>``, an init that signals the group) reaches only the Python
    side, which hands its jobs back and stops Spark in order. The JVM still ends with the driver: it exits when its
    standard input, a pipe from the driver, closes. (systemd's default stop signals every process of the service's
    cgroup, whatever its session; the stop copes with a JVM that is gone too.)"""
    from pyspark.core import context
    from pyspark.java_gateway import launch_gateway

    def launch(conf: Any = None) -> Any:
        return launch_gateway(conf, popen_kwargs={"start_new_session": True})

    context.launch_gateway = launch  # type: ignore[assignment]
    try:
        yield
    finally:
        context.launch_gateway = launch_gateway


def hand_back_all(rt: JobRuntime, *, quiet: bool = True) -> list[dict[str, Any]]:
    """Stop taking jobs here and give every running one back (see the module); returns what was done to each.
    With ``quiet`` (the driver owns Spark and the process: ``python -m app``) Spark's own log goes quiet first:
    cancelling the jobs makes it log each cancelled task and fit (Spark ML's Instrumentation logs a cancelled fit at
    ERROR with a Java stack trace), which is the stop, not a fault. A runtime embedded in a process that goes on
    (an application's own SparkSession, a test's) leaves the process's logging and Spark's log level alone."""
    if quiet:
        quiet_py4j()
        spark_call(lambda: rt.spark.sparkContext.setLogLevel("OFF"))
    done: list[dict[str, Any]] = []
    first = not rt.running.stopping.is_set()  # python -m app's end calls this again: the takes were waited for
    for running in rt.running.stop():
        with job_scope(running.job_id):  # its lines carry its job_id, as every line of a running job
            done += _hand_back_one(rt, running, spark_stops=quiet)
    # A delivery that was taking its job as the stop began registers it no more: it hands it back itself. Done
    # only once those are: a second signal exits then, and left STARTING such a job had no driver until its
    # heartbeat went stale.
    if first and not rt.running.wait_for_takes(TAKE_WAIT_S):
        log.warning("stopping: a job being taken was not handed back within %g s; the reconciler of another driver "
                    "will queue it again once its heartbeat is stale", TAKE_WAIT_S)  # fmt: skip
    return done


TAKE_WAIT_S = 5.0
"""How long a stop waits for the takes in flight (a short database write each) to hand their jobs back."""


def _hand_back_one(rt: JobRuntime, running: RunningJob, *, spark_stops: bool) -> list[dict[str, Any]]:
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
        log.warning("stopping: job %s attempt %d handed back (%s)", running.job_id, running.attempt,
                    outcome.get("how") or outcome["action"])  # fmt: skip
    running.cancel.set()
    _cancel_group(rt, running.job_id, future=spark_stops)
    return [] if outcome is None else [outcome]


def _cancel_group(rt: JobRuntime, job_id: str, *, future: bool) -> None:
    """Cancel the job's Spark jobs. With ``future`` (this driver stops Spark next), also those its thread submits
    after this: a Spark ML fit runs one Spark job after another, and a cancel that came between two of them (Spark:
    "Cannot find active jobs for it") left the fit running until Spark stopped, past the consumer's
    ``SPARKTRAIN_STOP_GRACE_S``. Not otherwise: the job may run again on this SparkContext, in the same group."""
    sc = rt.spark.sparkContext
    if future:
        spark_call(lambda: sc._jsc.sc().cancelJobGroupAndFutureJobs(job_id))
    else:
        spark_call(lambda: sc.cancelJobGroup(job_id))


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
