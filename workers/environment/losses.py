"""Executors lost while a job runs, said in the job's log.

Spark runs a lost executor's ordinary tasks again on the others and tells the job nothing: an xgboost job whose
executors ran out of heap after every fit succeeded with no word of it (walkthrough on a standalone cluster,
2026-12-07). A loss during a barrier stage ends the attempt (``WORKER_LOST``), and the warning says which executor
went and why.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from workers.context import JobContext

OOM_EXIT = "code 52"
"""How Spark reports an executor whose JVM threw an OutOfMemoryError (SparkExitCode.OOM)."""


def lost_executors(spark: SparkSession) -> dict[str, tuple[str, float]]:
    """Executors of this application that were removed (died, or their worker did), by id: where they ran and why
    Spark says they went (``127.0.0.1:41234: Command exited with code 52``), and when (ms since the epoch). Spark
    keeps the last 100 (``spark.ui.retainedDeadExecutors``), with the UI off too."""
    seq = spark.sparkContext._jsc.sc().statusStore().executorList(False)
    out: dict[str, tuple[str, float]] = {}
    for i in range(seq.size()):
        ex = seq.apply(i)
        if ex.isActive() or str(ex.id()) == "driver":
            continue
        reason, removed = ex.removeReason(), ex.removeTime()
        why = f"{ex.hostPort()}: {reason.get() if reason.isDefined() else 'no reason given'}"
        out[str(ex.id())] = (why, float(removed.get().getTime()) if removed.isDefined() else 0.0)
    return out


def lost_within(spark: SparkSession, seconds: float) -> int:
    """How many executors the application lost in the last ``seconds``."""
    since_ms = (time.time() - seconds) * 1000
    return sum(1 for _, removed in lost_executors(spark).values() if removed >= since_ms)


_jobs: OrderedDict[str, tuple[float, set[str]]] = OrderedDict()
"""Per job this driver ran lately: when its first attempt here began (ms) and the executors its log named. A loss
that Spark records after the attempt it ended has ended (the next attempt starts at once) is named by the next."""
_lock = threading.Lock()


def _job(job_id: str) -> tuple[float, set[str]]:
    with _lock:
        entry = _jobs.setdefault(job_id, (time.time() * 1000, set()))
        _jobs.move_to_end(job_id)
        while len(_jobs) > 1000:
            _jobs.popitem(last=False)
        return entry


@contextmanager
def losses_watched(ctx: JobContext, *, interval_s: float = 2.0) -> Iterator[None]:
    """While the block runs: a warning in the job's log for each executor the application loses (polled every
    ``interval_s``, and once more at the end), once per job and executor."""
    stop = threading.Event()
    since_ms, named = _job(ctx.job_id)

    def warn_new() -> None:
        for executor, (why, removed) in lost_executors(ctx.spark).items():
            with _lock:
                new = removed >= since_ms and executor not in named
                named.add(executor)
            if new:
                oom = " (exit code 52: its JVM ran out of heap; give executors more spark.executor.memory)"
                ctx.log(f"executor {executor} was lost while the job ran: {why}{oom if OOM_EXIT in why else ''}; "
                        "Spark runs its ordinary tasks again on the others (a barrier stage's loss ends the attempt), "
                        "and the cluster's master starts a replacement", "WARNING")  # fmt: skip

    def run() -> None:
        while not stop.wait(interval_s):
            try:
                warn_new()
            except Exception:  # best effort
                continue

    thread = threading.Thread(target=run, name=f"losses-{ctx.job_id[:8]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        with suppress(Exception):
            warn_new()  # one lost just before the end (its tasks ran again) is said too
