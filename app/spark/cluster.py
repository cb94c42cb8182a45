"""What the driver knows about its cluster: executors, cores, memory, GPU addresses, library versions."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LIBRARIES = ("pyspark", "torch", "xgboost", "pyarrow", "pandas", "numpy", "celery", "sqlalchemy", "fastapi")


def library_versions() -> dict[str, str | None]:
    """Installed versions read from package metadata: nothing is imported (torch stays out of the API)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in LIBRARIES:
        candidates = (name, "xgboost-cpu") if name == "xgboost" else (name,)
        versions[name] = None
        for dist in candidates:
            try:
                versions[name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return versions


def _scala_map(m: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    it = m.iterator()
    while it.hasNext():
        pair = it.next()
        out[str(pair._1())] = pair._2()
    return out


def executors(spark: SparkSession) -> list[dict[str, Any]]:
    """Active executors from Spark's status store (the data behind the UI's Executors tab; works with the UI off)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    seq = store.executorList(True)
    out = []
    for i in range(seq.size()):
        ex = seq.apply(i)
        resources = {name: [str(a) for a in info.addresses()] for name, info in _scala_map(ex.resources()).items()}
        out.append(
            {
                "id": str(ex.id()),
                "host_port": str(ex.hostPort()),
                "cores": int(ex.totalCores()),
                "max_memory_bytes": int(ex.maxMemory()),
                "active_tasks": int(ex.activeTasks()),
                "resources": resources,
            }
        )
    return out


def task_slots(spark: SparkSession) -> int:
    """How many tasks can run at once: what a barrier stage of N tasks needs to be at least N."""
    sc = spark.sparkContext
    task_cpus = int(sc.getConf().get("spark.task.cpus", "1"))
    infos = executors(spark)
    workers = [e for e in infos if e["id"] != "driver"] or infos
    return sum(e["cores"] // task_cpus for e in workers)
