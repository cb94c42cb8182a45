"""What the driver knows about its cluster: executors, cores, memory, GPU addresses, library versions."""

from __future__ import annotations

import platform
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
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
    stopping: int = 0
    """Of ``busy``: tasks of the asking job that Spark is still stopping (its earlier attempt's failed stage)."""

    def waiting_for(self, needed: int, *, retried: bool = False) -> str | None:
        """What a job that needs ``needed`` slots at once will wait for while other tasks hold them (a barrier
        stage starts when all its tasks can; until then its job showed "reading data" with no word of why); None
        when they are free now, or when the cluster could never hold them (the planning's 422). A ``retried`` job's
        earlier attempt may hold some (Spark kills a failed stage's tasks, and forgets a dead executor's, late)."""
        if self.count - self.busy >= needed or self.count < needed:
            return None
        held = f"{self.busy} of {self.count} are running other jobs' tasks"
        if retried and not self.stopping:
            held += " (or its earlier attempt's, which Spark is still stopping)"
        elif self.stopping:
            held = (f"{self.busy} of {self.count} are busy ({self.busy - self.stopping} with other jobs' tasks, "
                    f"{self.stopping} with this job's earlier tasks, which Spark is still stopping)")  # fmt: skip
        return f"waiting for task slots: {held}, and this job needs {needed} at once; it goes on when they are free"

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


def once_slots(
    count: Callable[[], TaskSlots],
    needed: int,
    *,
    wait_s: float,
    waiting: Callable[[TaskSlots], None],
    stop: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], None] = time.sleep,
) -> TaskSlots:
    """The slots ``count`` gives once there are ``needed``, asked again every second for up to ``wait_s``; ``waiting``
    is told the slots whenever their count changes while short (first before the first wait), ``stop`` ends it early.
    A job retried after an executor died is taken before the cluster's master has started the replacement (7 s on a
    quiet machine, 80 s under load): it waits for its slots to come back rather than fail for a cluster of fewer."""
    slots = count()
    deadline = time.monotonic() + wait_s
    told: int | None = None
    while slots.count < needed and time.monotonic() < deadline and not stop():
        if told != slots.count:
            waiting(slots)
            told = slots.count
        sleep(1.0)
        slots = count()
    return slots


def slot_count(spark: SparkSession) -> TaskSlots:
    """:func:`count_slots` of this session's executors, task CPUs and task GPU amount."""
    conf = spark.sparkContext.getConf()
    slots = count_slots(
        executors(spark),
        master=str(spark.sparkContext.master),
        task_cpus=int(conf.get("spark.task.cpus", "1") or 1),
        task_gpus=float(conf.get("spark.task.resource.gpu.amount", "0") or 0),
    )
    try:  # the scheduler's count: the status store writes a task's start up to seconds late
        running = _scala_map(spark.sparkContext._jsc.sc().taskScheduler().runningTasksByExecutors())
        return replace(slots, busy=sum(int(n) for n in running.values()))
    except Exception:
        return slots


@dataclass(frozen=True)
class GroupTasks:
    """A job's tasks as Spark's task scheduler has them now (the status store hears of a task's start up to a
    heartbeat late: a job read its own running barrier tasks as other jobs' there)."""

    running: int = 0
    stopping: int = 0
    """Running tasks of its stages that failed or were cancelled (an earlier attempt's), which Spark is killing."""
    pending: bool = False
    """A stage of it waits for slots: submitted, with tasks not started."""


def group_tasks(spark: SparkSession, group: str) -> GroupTasks:
    """The tasks of the Spark job group ``group`` (a job's id) in the scheduler's task sets."""
    queue = spark.sparkContext._jsc.sc().taskScheduler().rootPool().getSortedTaskSetQueue()
    running = stopping = 0
    pending = False
    for i in range(queue.size()):
        tasks = queue.apply(i)
        if tasks.taskSet().properties().getProperty("spark.jobGroup.id") != group:
            continue
        if tasks.isZombie():
            stopping += int(tasks.runningTasks())
            continue
        running += int(tasks.runningTasks())
        pending = pending or int(tasks.numTasks()) > int(tasks.runningTasks()) + int(tasks.tasksSuccessful())
    return GroupTasks(running=running, stopping=stopping, pending=pending)


def held_by_others(ctx: JobContext, needed: int) -> tuple[str | None, GroupTasks]:
    """What the job waits for (:meth:`TaskSlots.waiting_for`), counting the slots its own running tasks hold as
    free, and its tasks."""
    slots = slot_count(ctx.spark)  # before its tasks: one that starts in between is not counted as another's
    ours = group_tasks(ctx.spark, ctx.job_id)
    others = replace(slots, busy=max(0, slots.busy - ours.running), stopping=ours.stopping)
    return others.waiting_for(needed, retried=getattr(ctx, "attempt", 1) > 1), ours


def say_if_waiting(ctx: JobContext, needed: int, fraction: float = 0.0) -> bool:
    """Tell the job (progress message and log) when other tasks hold the slots its next stage needs at once, before
    it submits the stage; True when it said so."""
    try:
        waiting, _ = held_by_others(ctx, needed)
    except Exception:  # the scheduler is asked through internals: best effort
        return False
    if waiting is not None:
        ctx.progress(fraction, waiting)
        ctx.log(waiting)
    return waiting is not None


class SlotWatch:
    """What :func:`slots_watched` gives its block: :meth:`phase` says what the job does next (its progress
    message) and, before the phase submits anything, whether it will wait for task slots."""

    def __init__(self, ctx: JobContext, needed: int) -> None:
        self.ctx, self.needed, self.current, self.fraction, self.looks = ctx, needed, "", 0.0, 0
        self.since: float | None = None  # when the wait being shown began
        self._lock = threading.Lock()  # the block's phases and the watcher's looks, one at a time

    def phase(self, message: str, fraction: float = 0.0, *, said_again: bool = True) -> None:
        """``said_again``: the message comes back once a wait is over (not when the work reports its own progress
        as soon as it runs: the message would go back past it)."""
        with self._lock:  # a look between its message and its own look left "waiting" shown with no wait counted
            self.current, self.fraction = (message if said_again else ""), fraction
            self.ctx.progress(fraction, message)
            self.since = time.monotonic() if say_if_waiting(self.ctx, self.needed, fraction) else None

    def look(self) -> None:
        """Say that the job waits once it did on two looks in a row, and that the wait is over once its tasks run or
        other tasks no longer hold its slots (its stage may have run and ended between two looks)."""
        with self._lock:
            self._look()

    def _look(self) -> None:
        ctx = self.ctx
        waiting, ours = held_by_others(ctx, self.needed)
        if self.since is not None:
            if ours.running or waiting is None:
                ctx.log(f"task slots free after {time.monotonic() - self.since:.0f} s of waiting")
                self.since = None
                if self.current:
                    ctx.progress(self.fraction, self.current)
            return
        self.looks = self.looks + 1 if waiting is not None and ours.pending and not ours.running else 0
        if waiting is not None and self.looks >= 2:
            ctx.progress(self.fraction, waiting)
            ctx.log(waiting)
            self.since, self.looks = time.monotonic(), 0


@contextmanager
def slots_watched(ctx: JobContext, needed: int, *, interval_s: float = 1.0) -> Iterator[SlotWatch]:
    """While the block runs: whenever a Spark job of this job is held back because other tasks hold the slots (a
    stage of it is submitted, none of its tasks runs, and fewer than ``needed`` slots are free of other tasks, on
    two looks in a row), say so, and say when it goes on (the progress message goes back to the block's last
    :meth:`SlotWatch.phase`). The look before submitting missed two jobs submitted at once: both saw the slots
    free, and the second sat at "preparing the data" for 86 s with no word of why."""
    watch = SlotWatch(ctx, needed)
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(interval_s):
            try:
                watch.look()
            except Exception:  # the scheduler is asked through internals: best effort
                continue

    thread = threading.Thread(target=run, name=f"slots-{ctx.job_id[:8]}", daemon=True)
    thread.start()
    try:
        yield watch
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
