"""What the driver knows about its cluster: executors, cores, memory, GPU addresses, library versions."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RAPIDS_PLUGIN = "com.nvidia.spark.SQLPlugin"
# What the driver records in its own SparkConf at start-up (app/spark/profile.py), so that whoever holds the session
# (``/cluster``, a job) can tell why the plugin is or is not there without the settings it was built from.
PROFILE_KEY = "spark.sparktrain.profile"
RAPIDS_JAR_KEY = "spark.sparktrain.rapids.jar"
RAPIDS_OFF_KEY = "spark.sparktrain.rapids.off"

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


def has_gpus(spark: SparkSession) -> bool:
    """Whether tasks get GPUs: the session asks for them per task, or an executor has some."""
    conf = spark.sparkContext.getConf()
    if float(conf.get("spark.task.resource.gpu.amount", "0") or 0) > 0:
        return True
    return any(e["resources"].get("gpu") for e in executors(spark))


def gpu_addresses(spark: SparkSession) -> dict[str, list[str]]:
    """GPU addresses Spark knows of, by holder: ``driver`` (local masters run tasks there) and executor ids."""
    out: dict[str, list[str]] = {}
    driver = spark.sparkContext.resources.get("gpu")
    if driver is not None and driver.addresses:
        out["driver"] = [str(a) for a in driver.addresses]
    for info in executors(spark):
        gpus = info["resources"].get("gpu")
        if gpus and info["id"] != "driver":
            out[info["id"]] = gpus
    return out


def _class_loads(spark: SparkSession, name: str) -> bool:
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    try:
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName(name, False, loader)
        return True
    except Exception:
        return False


def rapids_status(spark: SparkSession) -> dict[str, Any]:
    """Whether the RAPIDS Accelerator is active in this session, read from the live session: ``spark.plugins``
    lists it, ``spark.rapids.sql.enabled`` is true and the JVM loads its class; ``reason`` says why not."""
    conf = spark.sparkContext.getConf()
    plugins = [p.strip() for p in (conf.get("spark.plugins") or "").split(",")]
    configured = RAPIDS_PLUGIN in plugins
    sql_enabled = str(spark.conf.get("spark.rapids.sql.enabled", "true")).lower() == "true"
    loads = configured and _class_loads(spark, RAPIDS_PLUGIN)
    reason: str | None = None
    if not configured:
        reason = conf.get(RAPIDS_OFF_KEY) or f"the RAPIDS plugin is not configured: spark.plugins lacks {RAPIDS_PLUGIN}"
    elif not loads:
        reason = (
            f"spark.plugins lists {RAPIDS_PLUGIN} but the driver's JVM cannot load it: put the RAPIDS jar on "
            "spark.jars and spark.driver.extraClassPath"
        )
    elif not sql_enabled:
        reason = "the RAPIDS plugin is loaded but spark.rapids.sql.enabled is false"
    return {
        "jar": conf.get(RAPIDS_JAR_KEY) or None,
        "profile": conf.get(PROFILE_KEY) or None,
        "plugin": RAPIDS_PLUGIN,
        "configured": configured,
        "class_loaded": loads,
        "sql_enabled": sql_enabled,
        "active": configured and loads and sql_enabled,
        "reason": reason,
    }
