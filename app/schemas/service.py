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
