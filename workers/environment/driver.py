"""Before a job's barrier stage: the executors' Python environment, compared with the driver's.

The Python counterpart of the seed article's Scala-suffix and shading errors: a driver and executors with
different pyspark, torch or xgboost versions fail late and obscurely (pickled functions that do not load,
NCCL or rabit protocol errors). One barrier stage of the job's width (so its tasks land where the job's will) has
every task describe its own process; the driver collects the answers. A mismatch fails the job before any data
moves, naming the executor and both versions. A set of executors that passed is not asked again.

The tasks never wait for each other (no ``BarrierTaskContext.allGather`` or ``barrier``): Spark serves a Python
task's ``allGather`` in a thread of the executor's Python runner, and a task killed while it waits there (its job
cancelled, or another task of the stage failed) throws out of that thread uncaught, which ends the executor's JVM
(exit code 50) and every other job's tasks on it. A task of this stage runs for milliseconds, then ends on its own,
so a cancel or a lost executor during the check kills nothing but its Python workers.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from packaging.version import InvalidVersion, Version

from workers.context import JobContext, JobFailure
from workers.environment.remote import describe

_checked: set[tuple[Any, ...]] = set()
_lock = threading.Lock()


def _base(version: str) -> str:
    """2.13.0+cu121 and 2.13.0+cpu are the same torch for pickles and protocols."""
    try:
        return Version(version).base_version
    except InvalidVersion:
        return version


def shipped_function(libraries: tuple[str, ...], cuda: bool) -> Callable[[Iterable[int]], Iterator[str]]:
    """The barrier task Spark ships: it reads the task's address from Spark's ``BarrierTaskContext`` and hands it
    to the executor-side :func:`workers.environment.remote.answer` (no ``allGather``: see the module's docstring)."""

    def describe_partition(_rows: Iterable[int]) -> Iterator[str]:
        from pyspark import BarrierTaskContext

        from workers.environment.remote import answer

        context = BarrierTaskContext.get()
        address = context.getTaskInfos()[context.partitionId()].address
        return answer(libraries, cuda, address=address)

    return describe_partition


def mismatches(driver: dict[str, Any], executors: list[dict[str, Any]]) -> list[str]:
    """Plain sentences, one per executor and difference."""
    problems: list[str] = []
    py = ".".join(driver["python"].split(".")[:2])
    for env in executors:
        where = f"executor at {env.get('executor') or '?'}"
        theirs = ".".join(str(env.get("python", "?")).split(".")[:2])
        if theirs != py:
            problems.append(f"{where} runs Python {env.get('python')}, the driver {driver['python']}")
        for name, mine in driver["libraries"].items():
            other = env.get("libraries", {}).get(name)
            if mine is None:
                continue
            if other is None:
                problems.append(f"{where} has no {name} (the driver has {mine})")
            elif _base(other) != _base(mine):
                problems.append(f"{where} has {name} {other}, the driver {mine}")
    return problems


def check_executors(ctx: JobContext, libraries: tuple[str, ...], tasks: int, *, cuda: bool = False) -> None:
    """Fail the job with ENVIRONMENT_MISMATCH unless the executors that run ``tasks`` barrier tasks match."""
    from workers.cluster import executors

    ids = tuple(sorted(e["id"] for e in executors(ctx.spark)))
    key = (ids, libraries, tasks, cuda)
    with _lock:
        if key in _checked:
            return
    mine = describe(libraries, cuda=False)
    tasks_rdd = ctx.spark.sparkContext.parallelize(range(tasks), tasks)
    rdd = tasks_rdd.barrier().mapPartitions(shipped_function(libraries, cuda))
    found = [json.loads(line) for line in rdd.collect()]
    problems = mismatches(mine, found)
    if problems:
        raise JobFailure(
            "ENVIRONMENT_MISMATCH",
            "the executors' Python environment differs from the driver's: "
            + "; ".join(problems)
            + ". Install the same versions on both (the docker images build the driver and the executors from one "
            "requirements set).",
        )
    versions = ", ".join(f"{k} {v}" for k, v in mine["libraries"].items() if v)
    hosts = sorted({str(e.get("executor")) for e in found})
    codes = ", ".join(sorted({str(e.get("code")) for e in found}))
    executors_seen = f"{len(hosts)} executor{'s' if len(hosts) != 1 else ''}"
    message = (
        f"executor environment matches the driver on {executors_seen}: Python {mine['python']}, {versions}; "
        f"sparktrain code from {codes}"
    )
    if cuda:  # one entry per executor, however many of its tasks answered
        seen: dict[str, set[str]] = {}
        for e in found:
            seen.setdefault(str(e.get("executor")), set()).add("yes" if e.get("cuda") else "no")
        message += "; CUDA " + ", ".join(f"{host}: {'/'.join(sorted(answers))}" for host, answers in seen.items())
    ctx.log(message)
    with _lock:
        _checked.add(key)
