"""What a job says while it waits for task slots, on the real local[2] session: a stage of the job held back by
another job's tasks is said whatever the stage (a torch job sat at "preparing the data" for 86 s while its
preparation waited), the message goes back to what the job was doing once its tasks run, and the job's own running
tasks are never counted as other jobs' (walkthrough on a standalone cluster, 2026-12-07). A job retried after an
executor died waits for the slots to come back."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from workers.cluster import TaskSlots, count_slots, group_tasks, once_slots, slot_count, slots_watched

MASTER = "spark://10.0.0.5:7077"
DRIVER = {"id": "driver", "host_port": "10.0.0.5:40000", "cores": 0, "resources": {}}


def executor(i: int, cores: int) -> dict[str, Any]:
    return {"id": str(i), "host_port": f"10.0.0.{10 + i}:4100", "cores": cores, "resources": {}}


class Ctx:
    """What slots_watched reads of a job context; what the job said, in order."""

    def __init__(self, spark: Any, job_id: str, attempt: int = 1) -> None:
        self.spark, self.job_id, self.attempt = spark, job_id, attempt
        self.said: list[tuple[str, str]] = []

    def progress(self, fraction: float, message: str | None = None) -> None:
        self.said.append(("progress", str(message)))

    def log(self, message: str, level: str = "INFO") -> None:
        self.said.append(("log", message))


def _hold(released: str) -> Callable[[Any], None]:
    def hold(_: Any) -> None:  # until the test lets go (at most a minute)
        import os
        import time

        deadline = time.monotonic() + 60
        while not os.path.exists(released) and time.monotonic() < deadline:
            time.sleep(0.05)

    return hold


@contextmanager
def _spark_job(spark: Any, group: str, released: str) -> Iterator[threading.Thread]:
    """Two tasks of the Spark job group ``group`` that run until ``released`` exists."""
    sc = spark.sparkContext

    def run() -> None:
        sc.setJobGroup(group, "held tasks")
        sc.parallelize(range(2), 2).foreach(_hold(released))

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield thread
    finally:
        Path(released).touch()
        thread.join(60)


def _until(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_phase_held_back_by_other_jobs_tasks_says_so_then_goes_on(spark: Any, tmp_path: Path) -> None:
    """The job's data preparation (an ordinary stage, not the barrier one) waits behind another job's two tasks."""
    ctx = Ctx(spark, "slot-watch-phase")
    with slots_watched(ctx, 2, interval_s=0.2) as slots:  # type: ignore[arg-type]
        slots.phase("preparing the data")  # the slots are free: nothing more said
        assert ctx.said == [("progress", "preparing the data")]
        with _spark_job(spark, "another-job", str(tmp_path / "other")):
            _until("the other job holds both slots", lambda: slot_count(spark).busy == 2)
            mine = threading.Thread(target=lambda: _spark_job_now(spark, ctx.job_id))
            mine.start()
            _until("the job said it waits", lambda: len(ctx.said) > 1)
        mine.join(60)
        _until("the job said it goes on", lambda: len(ctx.said) >= 4)
    waiting = ("waiting for task slots: 2 of 2 are running other jobs' tasks, and this job needs 2 at once; it goes "
               "on when they are free")  # fmt: skip
    assert ctx.said[1:3] == [("progress", waiting), ("log", waiting)], ctx.said
    assert ctx.said[3][0] == "log" and ctx.said[3][1].startswith("task slots free after "), ctx.said
    assert ctx.said[4:] == [("progress", "preparing the data")], ctx.said


def _spark_job_now(spark: Any, group: str) -> None:
    sc = spark.sparkContext
    sc.setJobGroup(group, "the watched job's preparation")
    sc.parallelize(range(4), 2).map(lambda x: x * 2).count()


def test_the_jobs_own_running_tasks_are_not_other_jobs(spark: Any, tmp_path: Path) -> None:
    """Its barrier tasks ran, and the job said that 4 of 4 slots ran other jobs' tasks: Spark's status store hears
    of a task's start up to a heartbeat late (on local[2] it counts one of two running tasks)."""
    ctx = Ctx(spark, "slot-watch-own")
    released = str(tmp_path / "released")
    with slots_watched(ctx, 2, interval_s=0.2), _spark_job(spark, ctx.job_id, released):  # type: ignore[arg-type]
        _until("its tasks run", lambda: group_tasks(spark, ctx.job_id).running == 2)
        time.sleep(1.5)  # several looks of the watcher while they run
        Path(released).touch()
    assert ctx.said == [], ctx.said


def test_a_retried_job_says_which_busy_tasks_are_its_earlier_attempts() -> None:
    """A retry counted the tasks of its own earlier attempt, still being killed, as other jobs' for 24 s."""
    busy = [executor(0, 1) | {"active_tasks": 1}, executor(1, 1) | {"active_tasks": 1}]
    slots = count_slots([DRIVER, *busy], master=MASTER, task_cpus=1)
    assert slots.waiting_for(2, retried=True) == (
        "waiting for task slots: 2 of 2 are running other jobs' tasks (or its earlier attempt's, which Spark is still "
        "stopping), and this job needs 2 at once; it goes on when they are free"
    )
    assert TaskSlots(**{**slots.__dict__, "stopping": 1}).waiting_for(2) == (
        "waiting for task slots: 2 of 2 are busy (1 with other jobs' tasks, 1 with this job's earlier tasks, which "
        "Spark is still stopping), and this job needs 2 at once; it goes on when they are free"
    )


def test_a_retried_job_waits_for_a_lost_executors_replacement_and_not_for_ever() -> None:
    """The retry of a job that lost an executor is taken before the replacement registers (7 to 80 s): it waits for
    its slots, saying how many there are each time that changes, up to a bound, and can be stopped."""
    listed = [[DRIVER, executor(1, 1)], [DRIVER, executor(1, 1)], [DRIVER, executor(1, 1), executor(2, 1)]]
    told: list[int] = []
    slept: list[float] = []

    def count() -> TaskSlots:
        infos = listed.pop(0) if len(listed) > 1 else listed[0]
        return count_slots(infos, master=MASTER, task_cpus=1)

    slots = once_slots(count, 2, wait_s=60, waiting=lambda s: told.append(s.count), sleep=slept.append)
    assert (slots.count, told, slept) == (2, [1], [1.0, 1.0])

    short = lambda: count_slots([DRIVER, executor(1, 1)], master=MASTER, task_cpus=1)  # noqa: E731
    assert once_slots(short, 2, wait_s=0.05, waiting=lambda s: None, sleep=lambda s: None).count == 1
    assert once_slots(short, 2, wait_s=60, waiting=lambda s: None, stop=lambda: True).count == 1
    assert once_slots(short, 1, wait_s=60, waiting=lambda s: os.abort()).count == 1  # enough: no wait


def test_a_look_during_a_phase_cannot_leave_a_wait_shown_that_is_not_counted(monkeypatch: Any) -> None:
    """The watcher's thread looked between a phase's message and the phase's own look: it said "waiting" (two looks),
    then the phase found the slots free and forgot the wait, so nothing ever put the phase's message back while the
    job's tasks ran (review, 2026-12-07). Phases and looks now take turns."""
    from workers import cluster

    class Tasks:
        def __init__(self, pending: int, running: int) -> None:
            self.pending, self.running = pending, running

    state: dict[str, Any] = {"waiting": "waiting for 2 task slots held by other jobs", "ours": Tasks(1, 0)}
    monkeypatch.setattr(cluster, "held_by_others", lambda ctx, needed: (state["waiting"], state["ours"]))
    ctx = Ctx(None, "j" * 32)
    watch = cluster.SlotWatch(ctx, 2)
    real_progress = ctx.progress

    def progress(fraction: float, message: str | None = None) -> None:
        real_progress(fraction, message)
        if message == "preparing the data":  # the watcher's two looks, from its own thread, land right here
            looker = threading.Thread(target=lambda: (watch.look(), watch.look()))
            looker.start()
            looker.join(timeout=2)  # (they wait for the phase now: they run once it is done)
            state["waiting"] = None  # ... and by the phase's own look the slots are free
            state["looker"] = looker

    ctx.progress = progress  # type: ignore[method-assign]
    watch.phase("preparing the data")
    state["looker"].join()
    state["ours"] = Tasks(0, 1)  # the job's stage runs
    for _ in range(3):
        watch.look()
    shown = [m for kind, m in ctx.said if kind == "progress"]
    assert shown[-1] == "preparing the data", shown
