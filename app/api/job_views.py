"""A job as the API shows it (``JobRead``), for every route that answers with a job: GET /jobs, POST /train,
POST /tune, POST /predict's batch job, the recipes. The ``state`` event of ``GET /jobs/{id}/events`` shows part of
the same job, built from the database row apart (app/services/events.py, ``read_state``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core.jobstates import JobStatus, JobType
from app.schemas.jobs import JobError, JobRead, ModelRef
from app.services import attempts

if TYPE_CHECKING:
    from app.db.models import Job


def to_job_read(job: Job) -> JobRead:
    # The events' state is built apart, in app/services/events.py (read_state): a field added here goes there too.
    return JobRead(
        id=job.id,
        type=JobType(job.type),
        status=JobStatus(job.status),
        framework=job.framework,
        name=job.name,
        progress=job.progress,
        progress_message=job.progress_message,
        attempt=job.attempt,
        max_attempts=job.max_attempts,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        heartbeat_at=job.heartbeat_at,
        request=job.request,
        result=job.result,
        error=JobError(reason=job.error_reason, message=job.error_message or "") if job.error_reason else None,
        model=ModelRef(name=job.model_name, version=job.model_version)
        if job.model_name and job.model_version
        else None,
        warnings=list(job.warnings or []),
        attempts=attempts.history(job),
        owner=job.owner,
        worker_id=job.worker_id,
        spark_app_id=job.spark_app_id,
        slots=job.slots if job.slots is not None else 1,
        waiting_for=job.waiting_for,
        parent_id=job.parent_id,
        trial=job.trial,
    )
