"""SQLAlchemy tables. The database, not Celery, is the source of truth for job state."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.db.base import Base, BigId, UTCDateTime, utcnow


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("owner", "idempotency_key", name="uq_jobs_owner_idempotency_key"),
        Index("ix_jobs_created_at_id", "created_at", "id"),
        Index("ix_jobs_owner_status", "owner", "status"),
        Index("ix_jobs_type_state_times", "type", "framework", "status", "started_at", "finished_at"),
        UniqueConstraint("parent_id", "trial", name="uq_jobs_parent_id_trial"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    type: Mapped[str] = mapped_column(String(16))
    framework: Mapped[str | None] = mapped_column(String(16))
    name: Mapped[str | None] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(16), index=True)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    progress_message: Mapped[str | None] = mapped_column(Text)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    plan: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """What the runner executes: the plan the request validated (workers.plans; None for jobs queued before plans
    were stored, which are planned again from ``request`` when they start)."""
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    warnings: Mapped[list[str]] = mapped_column(JSON, default=list)
    attempts: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, default=list)
    """One entry per attempt: attempt, queue, worker_id, started_at; ended early: ended_at, status, error_reason,
    error_message; a retry: queued_at, sent."""
    error_reason: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    # The model a job produced (train) or used (evaluate, predict); plain values, not a foreign key.
    model_name: Mapped[str | None] = mapped_column(String(200))
    model_version: Mapped[int | None] = mapped_column(Integer)
    owner: Mapped[str] = mapped_column(String(200), default="anonymous", index=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    request_hash: Mapped[str | None] = mapped_column(String(64))
    worker_id: Mapped[str | None] = mapped_column(String(200))
    spark_app_id: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    cancel_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    slots: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    """Task slots the job holds while it runs (its plan's ``num_workers``; 1 for one-task work): the slot quota."""
    waiting_for: Mapped[str | None] = mapped_column(String(32))
    """The quota a QUEUED job waits for (``concurrent_jobs``, ``task_slots``); None once a driver takes it."""
    woken_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    """When a waiting job's message was last sent again because its owner had room (app/services/quotas.py)."""
    parent_id: Mapped[str | None] = mapped_column(String(32), index=True)
    """The tune job a trial belongs to (plain value, not a foreign key); None for every other job."""
    trial: Mapped[int | None] = mapped_column(Integer)
    """A trial's number in its tune job (0, 1, ...): one job per number, however often the tune job resumes."""
    output_path: Mapped[str | None] = mapped_column(Text)
    """Where a batch prediction writes (its request's ``output_uri``): private to the job's owner
    (app/services/outputs.py); None for every other job."""
    output_key: Mapped[str | None] = mapped_column(String(64), index=True)
    """The SHA-256 of ``output_path``: paths are looked up by it (an index over the path itself could exceed
    PostgreSQL's limit on an index entry)."""


class RateBucket(Base):
    """A token bucket of requests per API key, shared by every driver on the database (Redis holds them when the
    broker is Redis). ``tokens`` as of ``updated`` (seconds since the epoch)."""

    __tablename__ = "rate_buckets"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    tokens: Mapped[float] = mapped_column(Float)
    updated: Mapped[float] = mapped_column(Float)


class JobMetric(Base):
    __tablename__ = "job_metrics"
    __table_args__ = (
        Index("ix_job_metrics_job_key_step", "job_id", "key", "step"),
        Index("ix_job_metrics_job_id_id", "job_id", "id"),
        # ids are never reused, on SQLite too: the event stream follows a job's points by id, and a retried job's
        # points past its checkpoint are dropped and written again (migration 0012)
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(100))
    step: Mapped[int] = mapped_column(Integer)
    epoch: Mapped[int | None] = mapped_column(Integer)
    value: Mapped[float] = mapped_column(Float)
    worker: Mapped[int | None] = mapped_column(Integer)
    time: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class JobLog(Base):
    __tablename__ = "job_logs"
    __table_args__ = (Index("ix_job_logs_job_id_id", "job_id", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    time: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    level: Mapped[str] = mapped_column(String(10))
    message: Mapped[str] = mapped_column(Text)


class Model(Base):
    __tablename__ = "models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    owner: Mapped[str] = mapped_column(String(200), default="anonymous")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """The highest version number ever given (migration 0014): a deleted version's number is never given again."""

    versions: Mapped[list[ModelVersion]] = relationship(
        back_populates="model", order_by="ModelVersion.version", lazy="selectin"
    )


class ModelVersion(Base):
    __tablename__ = "model_versions"
    __table_args__ = (UniqueConstraint("model_id", "version", name="uq_model_versions_model_id_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    framework: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(24), default="READY")
    artifact_uri: Mapped[str] = mapped_column(Text)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # A training job registers at most one version, however often its message is delivered.
    job_id: Mapped[str | None] = mapped_column(ForeignKey("jobs.id"), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    model: Mapped[Model] = relationship(back_populates="versions", lazy="joined")


class ModelAlias(Base):
    """A movable name for one version of a model (``champion``, ``production``), as MLflow's aliases."""

    __tablename__ = "model_aliases"
    __table_args__ = (UniqueConstraint("model_id", "alias", name="uq_model_aliases_model_id_alias"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    alias: Mapped[str] = mapped_column(String(100))
    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id", ondelete="CASCADE"))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    version: Mapped[ModelVersion] = relationship(lazy="joined")


class ModelTag(Base):
    """A key/value string tag of a model, as MLflow's registered model tags (``PUT /models/{name}/tags/{key}``)."""

    __tablename__ = "model_tags"
    __table_args__ = (UniqueConstraint("model_id", "key", name="uq_model_tags_model_id_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(250))
    value: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ModelVersionTag(Base):
    """A key/value string tag of one model version, as MLflow's model version tags."""

    __tablename__ = "model_version_tags"
    __table_args__ = (UniqueConstraint("version_id", "key", name="uq_model_version_tags_version_id_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(250))
    value: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Checkpoint(Base):
    __tablename__ = "checkpoints"
    __table_args__ = (UniqueConstraint("job_id", "epoch", name="uq_checkpoints_job_id_epoch"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    epoch: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer, default=0)
    uri: Mapped[str] = mapped_column(Text)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Dataset(Base):
    __tablename__ = "datasets"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(200))
    uri: Mapped[str] = mapped_column(Text)
    resolved_uri: Mapped[str] = mapped_column(Text)
    format: Mapped[str] = mapped_column(String(16))
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    schema: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    row_count: Mapped[int | None] = mapped_column(BigId)
    sample: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    bad_rows: Mapped[int] = mapped_column(BigId, default=0)
    owner: Mapped[str] = mapped_column(String(200), default="anonymous", index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    summary: Mapped[str] = mapped_column(String(16), default="complete", server_default="complete")
    """``complete``; ``pending`` while Spark reads what the driver could not (after the answer); ``failed``."""
    summary_error: Mapped[str | None] = mapped_column(Text)
    bad_rows_policy: Mapped[str] = mapped_column(String(8), default="fail", server_default="fail")
    """The registration's ``bad_rows`` (``fail`` or ``skip``): what a ``pending`` summary's read does with them."""
    warnings: Mapped[list[str]] = mapped_column(JSON, default=list, server_default=text("'[]'"))
    """What the registration warned about (a CSV that doubles its quotes without ``options.escape``)."""
