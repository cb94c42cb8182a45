"""What the driver knows about its cluster: executors, cores, memory, GPU addresses, library versions."""

from __future__ import annotations

import platform
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from workers.context import JobContext

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


def _is_local(master: str) -> bool:
    """``local``, ``local[4]``: tasks run in the driver; not ``local-cluster[...]``, which has executors."""
    return master == "local" or master.startswith("local[")


def hidden_master(master: str) -> str:
    """The master URL without its host and port (``spark://***``), for answers to callers who are not admins."""
    return re.sub(r"//[^/]+", "//***", master)


def _gpu_slots(addresses: int, per_task: float) -> int:
    """Tasks that fit on ``addresses`` GPUs at ``per_task`` each: a whole amount takes that many addresses, a
    fraction shares one address among ``int(1 / per_task)`` tasks (as Spark's scheduler places them)."""
    return addresses * int(1 / per_task) if per_task < 1 else int(addresses // per_task)


def _plural(n: float, word: str) -> str:
    return f"{n:g} {word}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class TaskSlots:
    """How many tasks can run at once (what a barrier stage of N tasks needs to be at least N), and what bounds it,
    for messages that say how to get more."""

    count: int
    master: str
    executors: int
    """Executors counted; 0 on a local master, whose tasks run in the driver."""
    by_cores: int
    """What the cores alone allow: ``cores // spark.task.cpus`` per executor."""
    gpus: int | None = None
    """The executors' GPU addresses when each task asks for some (``spark.task.resource.gpu.amount`` > 0)."""
    gpus_per_task: float = 0.0
    busy: int = 0
    """Tasks running now on what was counted (other jobs' when a job asks before it submits its own)."""

    def waiting_for(self, needed: int) -> str | None:
        """What a job that needs ``needed`` slots at once will wait for while other jobs' tasks hold them (a barrier
        stage starts when all its tasks can; until then its job showed "reading data" with no word of why); None
        when they are free now, or when the cluster could never hold them (the planning's 422)."""
        if self.count - self.busy >= needed or self.count < needed:
            return None
        return (f"waiting for task slots: {self.busy} of {self.count} are running other jobs' tasks, and this job "
                f"needs {needed} at once; it goes on when they are free")  # fmt: skip

    @property
    def local(self) -> bool:
        return _is_local(self.master)

    def shortfall(self, shown_master: str | None = None) -> str:
        """Why the cluster has only ``count`` slots and what to do, for ``... at once, and <this>``.
        ``shown_master``: the master as the reader may see it (default :func:`hidden_master`)."""
        if self.executors == 0 and not self.local:
            shown = hidden_master(self.master) if shown_master is None else shown_master
            return (
                f"no executors are registered with {shown} (the workers or the master are down, or they are still "
                "starting): try again once GET /cluster lists executors"
            )
        has = f"this cluster has {_plural(self.count, 'task slot')}"
        if self.gpus is not None and self.count < self.by_cores:
            return (
                f"{has} (each task needs {_plural(self.gpus_per_task, 'GPU')} and the executors have "
                f"{_plural(self.gpus, 'GPU')} in all); lower num_workers or add executors with GPUs"
            )
        return f"{has}; lower num_workers or add executors"


def workers_need(workers: int) -> str:
    """``2 workers need 2 task slots``, ``1 worker needs 1 task slot``."""
    return f"{_plural(workers, 'worker')} need{'s' if workers == 1 else ''} {_plural(workers, 'task slot')}"


def count_slots(
    infos: Sequence[Mapping[str, Any]], *, master: str, task_cpus: int, task_gpus: float = 0.0
) -> TaskSlots:
    """Slots of executors as :func:`executors` lists them. On a cluster master each executor gives
    ``cores // task_cpus`` slots, and no more than its GPU addresses allow when each task asks for ``task_gpus``
    (as Spark counts them for a barrier stage); the driver's entry gives none. On a local master the tasks run in
    the driver, on its cores: Spark gives local tasks no GPUs (the gpu profile leaves the per-task amount out)."""
    if _is_local(master):
        cores = sum(e["cores"] // task_cpus for e in infos)
        busy = sum(int(e.get("active_tasks") or 0) for e in infos)
        return TaskSlots(count=cores, master=master, executors=0, by_cores=cores, busy=busy)
    workers = [e for e in infos if e["id"] != "driver"]
    by_cores = [e["cores"] // task_cpus for e in workers]
    busy = sum(int(e.get("active_tasks") or 0) for e in workers)
    if task_gpus <= 0:
        return TaskSlots(count=sum(by_cores), master=master, executors=len(workers), by_cores=sum(by_cores), busy=busy)
    gpus = [len(e["resources"].get("gpu") or ()) for e in workers]
    count = sum(min(cores, _gpu_slots(n, task_gpus)) for cores, n in zip(by_cores, gpus, strict=True))
    return TaskSlots(count=count, master=master, executors=len(workers), by_cores=sum(by_cores), gpus=sum(gpus),
                     gpus_per_task=task_gpus, busy=busy)  # fmt: skip


def once_registered(
    count: Callable[[], TaskSlots],
    *,
    wait_s: float,
    waiting: Callable[[], None] = lambda: None,
    stop: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], None] = time.sleep,
) -> TaskSlots:
    """The slots ``count`` gives once a cluster master has an executor, asked again every second for up to
    ``wait_s`` (``waiting`` is called before the first wait, ``stop`` ends it early). A driver that has just started on
    a cluster takes queued jobs before its executors register (10-15 s after start-up): it waits for them rather
    than fail a job for a cluster of none. A local master has no executors to wait for."""
    slots = count()
    deadline = time.monotonic() + wait_s
    told = False
    while not slots.local and slots.executors == 0 and time.monotonic() < deadline and not stop():
        if not told:
            waiting()
            told = True
        sleep(1.0)
        slots = count()
    return slots


def slot_count(spark: SparkSession) -> TaskSlots:
    """:func:`count_slots` of this session's executors, task CPUs and task GPU amount."""
    conf = spark.sparkContext.getConf()
    return count_slots(
        executors(spark),
        master=str(spark.sparkContext.master),
        task_cpus=int(conf.get("spark.task.cpus", "1") or 1),
        task_gpus=float(conf.get("spark.task.resource.gpu.amount", "0") or 0),
    )


def say_if_waiting(ctx: JobContext, needed: int) -> None:
    """Tell the job (progress message and log) when other jobs' tasks hold the slots its next stage needs at once."""
    waiting = slot_count(ctx.spark).waiting_for(needed)
    if waiting is not None:
        ctx.progress(0.0, waiting)
        ctx.log(waiting)


@contextmanager
def slots_watched(ctx: JobContext, needed: int, *, interval_s: float = 1.0) -> Iterator[None]:
    """While the Spark job started inside runs: when its last stage (the training's barrier stage of ``needed``
    tasks) is held back for other jobs' tasks, say so as :func:`say_if_waiting` does. The look before submitting
    missed two jobs submitted at once: both saw the slots free, and the second sat at "preparing the data" with no
    word of why. Its earlier stages (a shuffle) run first: while any task of this job runs, the busy slots are partly
    its own, and nothing is said."""
    stop = threading.Event()
    tracker = ctx.spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(ctx.job_id))  # the job's earlier Spark jobs (reading, counting)

    def ours() -> tuple[Any, list[Any]] | None:
        started = [j for j in tracker.getJobIdsForGroup(ctx.job_id) if j not in before]
        info = tracker.getJobInfo(max(started)) if started else None
        if info is None or not info.stageIds:
            return None
        stages = [tracker.getStageInfo(s) for s in sorted(info.stageIds)]
        return stages[-1], [s for s in stages if s is not None]

    def held_back() -> bool:
        found = ours()
        if found is None or found[0] is None:
            return False
        last, stages = found
        return last.numCompletedTasks == 0 and not any(s.numActiveTasks for s in stages)

    def watch() -> None:
        while not stop.wait(interval_s):
            try:
                found = ours()
                if (
                    found is not None
                    and found[0] is not None
                    and (found[0].numActiveTasks or found[0].numCompletedTasks)
                ):
                    return  # the barrier stage runs
                if not held_back():
                    continue
                waiting = slot_count(ctx.spark).waiting_for(needed)
                if waiting is not None and held_back():  # again: its tasks may have started meanwhile
                    ctx.progress(0.0, waiting)
                    ctx.log(waiting)
                    return
            except Exception:  # the tracker is best effort
                continue

    thread = threading.Thread(target=watch, name=f"slots-{ctx.job_id[:8]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def task_slots(spark: SparkSession) -> int:
    """How many tasks can run at once: what a barrier stage of N tasks needs to be at least N."""
    return slot_count(spark).count


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
