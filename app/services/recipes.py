"""Recipe jobs: check the request against the cluster, then submit the job with its plan."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import ValidationFailed
from app.core.jobstates import JobType
from app.core.settings import Settings
from app.db.models import Job
from app.schemas.recipes import GPU_SMOKE, GpuSmokeRequest
from app.services import jobs, quotas
from workers import cluster
from workers.recipes.gpu_smoke import GpuSmokePlan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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


def plan_gpu_smoke(request: GpuSmokeRequest) -> GpuSmokePlan:
    return GpuSmokePlan(rows=request.rows, partitions=request.partitions, device=request.device)


def submit_gpu_smoke(
    *,
    db: sessionmaker[Session],
    spark: SparkSession,
    enqueue: Callable[[str, str], None],
    request: GpuSmokeRequest,
    owner: str = "anonymous",
    idempotency_key: str | None = None,
    settings: Settings | None = None,
) -> tuple[Job, bool]:
    fingerprint = jobs.request_fingerprint(request.model_dump(mode="json"))  # as stored before: old keys replay
    first = jobs.replayed(db=db, owner=owner, idempotency_key=idempotency_key, fingerprint=fingerprint)
    if first is not None:  # a replay returns its job, whatever the cluster has become since
        return first, False
    check_gpu_smoke(spark=spark, request=request)
    return jobs.submit(
        db=db,
        enqueue=enqueue,
        job_type=JobType.RECIPE,
        request=request.model_dump(mode="json"),
        plan=plan_gpu_smoke(request),
        name=GPU_SMOKE,
        owner=owner,
        idempotency_key=idempotency_key,
        max_attempts=1,
        limits=quotas.limits_for(settings=settings, owner=owner) if settings is not None else None,
    )
