"""Readiness of the SparkSession: on a cluster master it is ready once an executor has registered, and not ready
again when every executor is gone (the workers or the master died: a standalone master that restarts does not take
the application back); a local master runs tasks in the driver."""

from __future__ import annotations

from typing import Any

from app.services.health import executors_state, spark_state
from workers.cluster import count_slots

DRIVER = {"id": "driver", "host_port": "10.0.0.2:41957", "cores": 0, "max_memory_bytes": 1, "active_tasks": 0,
          "resources": {}}  # fmt: skip
EXECUTOR = {**DRIVER, "id": "0", "host_port": "10.0.0.7:41427", "cores": 2, "resources": {"gpu": ["0"]}}


def test_a_cluster_master_is_ready_with_executors_only() -> None:
    master = "spark://10.0.0.5:7077"
    assert executors_state(count_slots([DRIVER, EXECUTOR], master=master, task_cpus=1)) == "ok"
    assert executors_state(count_slots([DRIVER], master=master, task_cpus=1)) == (
        "failed: no executors registered with spark://***: the cluster's workers or master are down, or they are "
        "still starting"
    )
    # an executor whose GPUs run no task still makes the driver ready: planning says what the slots lack
    assert executors_state(count_slots([DRIVER, {**EXECUTOR, "resources": {}}], master=master, task_cpus=1,
                                       task_gpus=1.0)) == "ok"  # fmt: skip


def test_a_local_master_is_ready_without_executors(spark: Any) -> None:
    assert executors_state(count_slots([{**DRIVER, "cores": 2}], master="local[2]", task_cpus=1)) == "ok"
    assert spark_state(spark) == "ok"
