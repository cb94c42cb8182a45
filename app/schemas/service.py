"""Wire models of the service endpoints: health, readiness, cluster."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class Health(BaseModel):
    status: str = "ok"


class Readiness(BaseModel):
    status: str
    checks: dict[str, str] = Field(description="database, broker, spark, consumer: 'ok' or what failed")


class ExecutorInfo(BaseModel):
    id: str
    host_port: str
    cores: int
    max_memory_bytes: int
    active_tasks: int
    resources: dict[str, list[str]] = Field(description="e.g. {'gpu': ['0', '1']}")


class RapidsStatus(BaseModel):
    """The RAPIDS Accelerator for Apache Spark in this driver's session (``spark-conf/gpu.conf``)."""

    jar: str | None = Field(description="The RAPIDS jar found at start-up, or null.")
    profile: str | None = Field(description="The Spark profile the driver started with (SPARKTRAIN_SPARK_PROFILE).")
    plugin: str = Field(description="The plugin class: com.nvidia.spark.SQLPlugin.")
    configured: bool = Field(description="spark.plugins lists the plugin.")
    class_loaded: bool = Field(description="The driver's JVM loads the plugin class.")
    sql_enabled: bool = Field(description="spark.rapids.sql.enabled (default true).")
    active: bool = Field(description="configured, loaded and enabled: SQL operators may run on GPUs.")
    reason: str | None = Field(description="Why it is not active; null when it is.")


class ClusterRead(BaseModel):
    master: str
    app_id: str
    app_name: str
    spark_version: str
    default_parallelism: int
    task_slots: int
    executors: list[ExecutorInfo]
    versions: dict[str, str | None]
    driver: dict[str, Any]
    gpu_addresses: dict[str, list[str]] = Field(
        default_factory=dict,
        description="GPU addresses Spark knows of, by holder ('driver' or an executor id); {} without GPUs.",
    )
    rapids: RapidsStatus | None = Field(None, description="The RAPIDS Accelerator: configured, active, or why not.")
    master_reachable: bool | None = Field(
        None,
        description="A standalone master (spark://): whether it (or a standby) accepts a connection now; null for "
        "other masters (local, yarn, k8s). While false, running jobs go on, on the executors there are, and a lost "
        "executor is not replaced until the master is back.",
    )
