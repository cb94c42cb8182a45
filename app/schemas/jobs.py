"""Wire models of jobs, their metrics and their logs (API.md "Jobs")."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.core.jobstates import JobStatus, JobType
from app.schemas.models import Framework


class JobError(BaseModel):
    reason: str = Field(examples=["BAD_ROWS"])
    message: str


class ModelRef(BaseModel):
    name: str
    version: int


class JobRead(BaseModel):
    # Every member is in every answer: required in the document (a generated client's field is not ``Unset``).
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    id: str
    type: JobType
    status: JobStatus
    framework: Framework | None
    name: str | None
    progress: float = Field(ge=0, le=1)
    progress_message: str | None
    attempt: int
    max_attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    request: dict[str, Any]
    result: dict[str, Any] | None
    error: JobError | None
    model: ModelRef | None
    warnings: list[str]
    attempts: list[dict[str, Any]] = Field(
        default_factory=list,
        description="One entry per attempt: attempt, queue, worker_id, started_at; an attempt that ended without "
        "finishing the job (DRIVER_LOST, DRIVER_STOPPED, WORKER_LOST, STORAGE_FULL, ...) adds ended_at, status, "
        "error_reason and error_message; a retry adds queued_at and sent (whether its message reached the broker), "
        "and not_before when it waits before it is sent. Once the job has finished, its last attempt also has "
        "ended_at and status (the job's finished_at and status), and the error when it failed.",
    )
    owner: str
    worker_id: str | None = Field(
        description="The driver process that runs (or ran) the job, host:pid:boot: with several drivers sharing the "
        "broker and the database, which one took it."
    )
    spark_app_id: str | None
    slots: int = Field(1, description="Task slots the job holds while it runs (the owner's task_slots quota).")
    waiting_for: str | None = Field(
        None, description="A QUEUED job waiting for its owner's quota (concurrent_jobs or task_slots) to free up."
    )
    parent_id: str | None = Field(None, description="A trial's tune job (POST /tune); None for other jobs.")
    trial: int | None = Field(None, description="A trial's number in its tune job.")


class JobPage(BaseModel):
    items: list[JobRead]
    next_cursor: str | None


class MetricPoint(BaseModel):
    key: str
    step: int
    epoch: int | None
    value: float
    worker: int | None
    time: datetime


class MetricsRead(BaseModel):
    metrics: list[MetricPoint]
    next_cursor: str | None = Field(
        None,
        description="Pass as `cursor` (with the same `key` and `since_step`) for the points after the last one "
        "returned; null when this page holds the last point there is now.",
    )


class LogLine(BaseModel):
    id: int
    time: datetime
    level: str
    message: str


class LogsRead(BaseModel):
    lines: list[LogLine]
    next_after: int | None = Field(description="Pass as `after` to follow the log.")
