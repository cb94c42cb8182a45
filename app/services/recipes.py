"""Recipe jobs: check the request against the cluster, write the QUEUED job, commit, then enqueue."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import ValidationFailed
from app.core.jobstates import JobType
from app.db.models import Job
from app.db.session import transaction
from app.schemas.recipes import GPU_SMOKE, GpuSmokeRequest
from app.services import jobs
from workers import cluster
from workers.families import task_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Enqueue = Callable[[str, str], None]


def check_gpu_smoke(*, spark: SparkSession, request: GpuSmokeRequest) -> None:
    """``device: cuda`` needs an active RAPIDS plugin and GPUs Spark knows of; say how to get them."""
    if request.device != "cuda":
        return
    rapids = cluster.rapids_status(spark)
    if not rapids["active"]:
        raise ValidationFailed.at(
            "device",
            f"cuda needs the RAPIDS Accelerator, which is not active here: {rapids['reason']}. "
            "Use device 'auto' to run on what this cluster has.",
        )
    if not cluster.gpu_addresses(spark):
        raise ValidationFailed.at(
            "device",
            "cuda needs GPUs, and Spark knows of none: give executors GPUs (spark.executor.resource.gpu.amount "
            "and a discovery script, spark-conf/gpu.conf) or use device 'auto'.",
        )


def submit_gpu_smoke(
    *,
    db: sessionmaker[Session],
    spark: SparkSession,
    enqueue: Enqueue,
    request: GpuSmokeRequest,
    owner: str = "anonymous",
    idempotency_key: str | None = None,
) -> tuple[Job, bool]:
    check_gpu_smoke(spark=spark, request=request)
    return _submit(
        db=db,
        enqueue=enqueue,
        recipe=GPU_SMOKE,
        body=request.model_dump(mode="json"),
        owner=owner,
        idempotency_key=idempotency_key,
    )


def _submit(
    *,
    db: sessionmaker[Session],
    enqueue: Enqueue,
    recipe: str,
    body: dict[str, Any],
    owner: str,
    idempotency_key: str | None,
) -> tuple[Job, bool]:
    with transaction(db) as session:
        job, created = jobs.create_job(
            session=session,
            job_type=JobType.RECIPE,
            request=body,
            name=recipe,
            owner=owner,
            idempotency_key=idempotency_key,
            max_attempts=1,
        )
    if created:
        jobs.enqueue_new(db=db, enqueue=enqueue, task=task_name(JobType.RECIPE, ""), job_id=job.id)
    return job, created
