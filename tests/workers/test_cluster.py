"""Task slots: Spark's count for a barrier stage, from executors as the status store lists them (the entries below
are what ``executors()`` read from a standalone cluster: a 2-core worker with one stand-in GPU under the gpu
profile), and on the real local[2] session."""

from __future__ import annotations

from typing import Any

import pytest

from workers.cluster import count_slots, hidden_master, once_registered, slot_count, task_slots, workers_need

MASTER = "spark://10.0.0.5:7077"
DRIVER = {"id": "driver", "host_port": "10.0.0.2:41957", "cores": 0, "max_memory_bytes": 1099746508,
          "active_tasks": 0, "resources": {}}  # fmt: skip


def executor(i: int, cores: int, gpus: list[str] | None = None) -> dict[str, Any]:
    return {"id": str(i), "host_port": f"10.0.0.{7 + i}:41427", "cores": cores, "max_memory_bytes": 455501414,
            "active_tasks": 0, "resources": {"gpu": gpus} if gpus is not None else {}}  # fmt: skip


def test_a_gpu_per_task_bounds_the_slots_and_says_so() -> None:
    """The walkthrough's cluster: /cluster said 2 slots, and a 2-worker torch job failed in Spark's barrier check."""
    slots = count_slots([DRIVER, executor(0, 2, ["0"])], master=MASTER, task_cpus=1, task_gpus=1.0)
    assert (slots.count, slots.by_cores, slots.gpus, slots.executors) == (1, 2, 1, 1)
    assert slots.shortfall() == (
        "this cluster has 1 task slot (each task needs 1 GPU and the executors have 1 GPU in all); lower "
        "num_workers or add executors with GPUs"
    )


@pytest.mark.parametrize(
    ("infos", "task_cpus", "task_gpus", "count"),
    [
        ([executor(0, 1, ["0"]), executor(1, 1, ["0"])], 1, 1.0, 2),  # tests/cluster: the cores bound it
        ([executor(0, 8, ["0", "1"])], 1, 1.0, 2),
        ([executor(0, 8, ["0", "1", "2"])], 1, 2.0, 1),  # a whole amount takes that many addresses
        ([executor(0, 8, ["0"])], 1, 0.25, 4),  # a fraction shares an address (RAPIDS SQL)
        ([executor(0, 8, ["0"])], 4, 0.25, 2),
        ([executor(0, 4, ["0", "1"]), executor(1, 4)], 1, 1.0, 2),  # an executor without GPUs runs no such task
        ([executor(0, 4), executor(1, 3)], 2, 0.0, 3),  # no GPU per task: the cores alone
    ],
)
def test_slots_per_executor_are_the_lesser_of_cores_and_gpus(
    infos: list[dict[str, Any]], task_cpus: int, task_gpus: float, count: int
) -> None:
    slots = count_slots([DRIVER, *infos], master=MASTER, task_cpus=task_cpus, task_gpus=task_gpus)
    assert slots.count == count and slots.executors == len(infos)


def test_a_cluster_without_executors_says_so_rather_than_to_lower_num_workers() -> None:
    slots = count_slots([DRIVER], master=MASTER, task_cpus=1, task_gpus=1.0)
    assert (slots.count, slots.executors) == (0, 0)
    says = slots.shortfall()
    assert says.startswith("no executors are registered with spark://*** (the workers or the master are down, or ")
    assert "10.0.0.5" not in says and "lower num_workers" not in says
    assert MASTER in slots.shortfall(MASTER)


def test_a_local_master_counts_the_drivers_cores_and_no_gpus() -> None:
    """Spark gives local tasks no GPUs: a per-task amount set there by hand does not change the count."""
    driver = {**DRIVER, "cores": 4, "resources": {"gpu": ["0"]}}
    for master in ("local[4]", "local"):
        slots = count_slots([driver], master=master, task_cpus=2, task_gpus=1.0)
        assert (slots.count, slots.executors, slots.local) == (2, 0, True)
        assert slots.shortfall() == "this cluster has 2 task slots; lower num_workers or add executors"
    assert not count_slots([DRIVER], master="local-cluster[2,1,1024]", task_cpus=1).local


def test_messages_count_in_words() -> None:
    assert workers_need(1) == "1 worker needs 1 task slot"
    assert workers_need(3) == "3 workers need 3 task slots"
    assert hidden_master(MASTER) == "spark://***" and hidden_master("local[2]") == "local[2]"


def test_the_count_is_sparks_own_on_the_real_session(spark: Any) -> None:
    sc = spark.sparkContext
    profile = sc._jsc.sc().resourceProfileManager().defaultResourceProfile()
    slots = slot_count(spark)
    assert slots.count == task_slots(spark) == sc._jsc.sc().maxNumConcurrentTasks(profile) == 2
    assert (slots.local, slots.executors, slots.gpus) == (True, 0, None)


def test_a_job_waits_for_a_cluster_s_first_executor_and_not_for_ever() -> None:
    """A driver just started on a cluster master takes queued jobs before its executors register (10-15 s): the job
    waits for them (its plan's slots were counted by a driver that had them), up to a bound, and can be stopped."""
    listed = [[DRIVER], [DRIVER], [DRIVER, executor(0, 2)]]  # registered at the third look
    waits: list[float] = []
    seen: list[int] = []

    def count() -> Any:
        infos = listed.pop(0) if len(listed) > 1 else listed[0]
        seen.append(len(infos))
        return count_slots(infos, master=MASTER, task_cpus=1)

    slots = once_registered(count, wait_s=60, waiting=lambda: waits.append(0.0), sleep=waits.append)
    assert (slots.count, slots.executors, seen) == (2, 1, [1, 1, 2])
    assert waits == [0.0, 1.0, 1.0]  # told once, then slept twice

    none = once_registered(lambda: count_slots([DRIVER], master=MASTER, task_cpus=1), wait_s=0.05,
                           sleep=lambda s: None)  # fmt: skip
    assert none.executors == 0 and none.shortfall().startswith("no executors are registered with spark://***")
    stopped = once_registered(lambda: count_slots([DRIVER], master=MASTER, task_cpus=1), wait_s=60,
                              stop=lambda: True)  # fmt: skip
    assert stopped.executors == 0
    local = once_registered(lambda: count_slots([DRIVER | {"cores": 2}], master="local[2]", task_cpus=1), wait_s=60,
                            stop=lambda: pytest.fail("a local master waits for nothing"))  # fmt: skip
    assert local.count == 2


def test_a_job_says_when_other_jobs_tasks_hold_the_slots_it_needs() -> None:
    busy = [executor(0, 1) | {"active_tasks": 1}, executor(1, 1) | {"active_tasks": 1}]
    slots = count_slots([DRIVER, *busy], master=MASTER, task_cpus=1)
    assert slots.waiting_for(2) == (
        "waiting for task slots: 2 of 2 are running other jobs' tasks, and this job needs 2 at once; it goes on when "
        "they are free"
    )
    assert slots.waiting_for(3) is None  # more than the cluster has: the planning's 422, not a wait
    free = count_slots([DRIVER, executor(0, 1), executor(1, 1) | {"active_tasks": 1}], master=MASTER, task_cpus=1)
    assert free.waiting_for(1) is None and free.waiting_for(2) is not None


def test_the_busy_slots_of_the_real_session_are_its_running_tasks(spark: Any, tmp_path: Any) -> None:
    """local[2]: another job's two tasks hold both slots while they run, and none once they have ended."""
    import threading
    import time

    sc = spark.sparkContext
    released = str(tmp_path / "released")

    def hold(_: Any) -> None:  # until the test lets go (at most a minute)
        import os
        import time

        deadline = time.monotonic() + 60
        while not os.path.exists(released) and time.monotonic() < deadline:
            time.sleep(0.05)

    holder = threading.Thread(target=lambda: sc.parallelize(range(2), 2).foreach(hold))
    holder.start()
    try:
        deadline = time.monotonic() + 60
        while slot_count(spark).busy < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert slot_count(spark).waiting_for(2) is not None, slot_count(spark)
        assert slot_count(spark).waiting_for(1) is not None  # none free
    finally:
        (tmp_path / "released").touch()
        holder.join(60)
    deadline = time.monotonic() + 30  # the status store hears of the tasks' end from Spark's listener bus
    while slot_count(spark).busy and time.monotonic() < deadline:
        time.sleep(0.1)
    assert slot_count(spark).busy == 0 and slot_count(spark).waiting_for(2) is None


def test_a_barrier_stage_held_back_by_other_jobs_tasks_says_so(spark: Any, tmp_path: Any) -> None:
    """Two jobs submitted at once both saw the slots free before submitting; the second's barrier stage then waited
    with no word of why (torch walkthrough). While it is submitted and none of its tasks runs, the job says so."""
    import threading
    import time
    from types import SimpleNamespace

    from workers.cluster import slots_watched

    sc = spark.sparkContext
    released = str(tmp_path / "released")
    said: list[str | None] = []
    ctx = SimpleNamespace(job_id="slots-watch-job", spark=spark, progress=lambda f, m=None: said.append(m),
                          log=lambda m, level="INFO": None)  # fmt: skip

    def hold(_: Any) -> None:
        import os
        import time

        deadline = time.monotonic() + 60
        while not os.path.exists(released) and time.monotonic() < deadline:
            time.sleep(0.05)

    holder = threading.Thread(target=lambda: sc.parallelize(range(2), 2).foreach(hold))
    holder.start()
    deadline = time.monotonic() + 60
    while slot_count(spark).busy < 2 and time.monotonic() < deadline:
        time.sleep(0.1)

    def barrier_job() -> None:
        sc.setJobGroup(ctx.job_id, "the watched job")
        shuffled = sc.parallelize(range(4), 2).map(lambda x: (x, x)).partitionBy(2)  # a stage before the barrier's
        shuffled.barrier().mapPartitions(lambda rows: iter([sum(1 for _ in rows)])).collect()

    try:
        with slots_watched(ctx, 2, interval_s=0.2):  # type: ignore[arg-type]
            waiter = threading.Thread(target=barrier_job)
            waiter.start()
            deadline = time.monotonic() + 30
            while not said and time.monotonic() < deadline:
                time.sleep(0.1)
            (tmp_path / "released").touch()
            waiter.join(60)
    finally:
        (tmp_path / "released").touch()
        holder.join(60)
    assert said and str(said[0]).startswith("waiting for task slots: 2 of 2 are running other jobs' tasks"), said
