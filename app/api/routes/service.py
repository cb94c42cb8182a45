"""Liveness, readiness and what the driver knows about its Spark cluster."""

from __future__ import annotations

import os

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.api.deps import CallerDep, RuntimeDep
from app.core.errors import PROBLEM_BASE
from app.schemas.service import ClusterRead, ExecutorInfo, Health, RapidsStatus, Readiness
from app.services.access import visible_job_ids
from app.services.health import master_reachable, readiness
from workers import cluster

router = APIRouter(tags=["service"])


@router.get("/healthz", response_model=Health, summary="Liveness: the process answers")
def healthz() -> Health:
    return Health()


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="Readiness: database, broker and SparkSession answer",
)
def readyz(rt: RuntimeDep, request: Request) -> Readiness | JSONResponse:
    checks = readiness(
        engine=rt.engine,
        celery=rt.celery,
        spark=rt.spark,
        consumer=rt.consumer,
        expect_consumer=rt.settings.in_process_consumer,
    )
    failed = {k: v for k, v in checks.items() if v != "ok"}
    if failed:
        return JSONResponse(
            {
                "type": PROBLEM_BASE + "not-ready",
                "title": "Not ready",
                "status": 503,
                "detail": "; ".join(f"{k} {v}" for k, v in failed.items()),
                "checks": checks,
                "request_id": getattr(request.state, "request_id", None),
            },
            status_code=503,
            media_type="application/problem+json",
        )
    return Readiness(status="ready", checks=checks)


HIDDEN = "***"
"""What a key that is not an admin sees in place of an address (the fields stay, as the API's contract has them)."""


@router.get(
    "/cluster", response_model=ClusterRead, summary="Spark master, application, executors, GPUs, RAPIDS, versions"
)
def get_cluster(rt: RuntimeDep, caller: CallerDep) -> ClusterRead:
    """The driver's details are an operator's: an admin sees the database and broker (passwords hidden) and every
    running job; another key sees its own running jobs only, and no addresses."""
    sc = rt.spark.sparkContext
    driver = {
        "worker_id": rt.jobs.worker_id,
        "pid": os.getpid(),
        "in_process_consumer": rt.consumer is not None,
        "consumer_concurrency": rt.settings.consumer_concurrency,
        "running_jobs": visible_job_ids(db=rt.db, job_ids=rt.jobs.running.ids(), caller=caller),
    }
    executors = [ExecutorInfo(**e) for e in cluster.executors(rt.spark)]
    master = str(sc.master)
    if caller.admin:
        driver["database"] = rt.settings.redacted_url(rt.settings.database_url)
        driver["broker"] = rt.settings.redacted_url(rt.settings.broker_url)
    else:  # no address of the cluster's machines, nor the driver's host and process (its id is host:pid:boot)
        del driver["pid"]
        driver["worker_id"] = ":".join([HIDDEN, HIDDEN, str(driver["worker_id"]).rpartition(":")[2]])
        executors = [e.model_copy(update={"host_port": HIDDEN}) for e in executors]
        master = cluster.hidden_master(master)
    return ClusterRead(
        master=master,
        app_id=sc.applicationId,
        app_name=sc.appName,
        spark_version=sc.version,
        default_parallelism=sc.defaultParallelism,
        task_slots=cluster.task_slots(rt.spark),
        executors=executors,
        versions=cluster.library_versions(),
        driver=driver,
        gpu_addresses=cluster.gpu_addresses(rt.spark),
        rapids=RapidsStatus(**cluster.rapids_status(rt.spark)),
        master_reachable=master_reachable(str(sc.master)),
    )
