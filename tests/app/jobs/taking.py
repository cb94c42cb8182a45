"""Taking a job as a runtime's delivery does, for the tests that drive a runner's steps by hand."""

from __future__ import annotations

from pathlib import Path

from app.core.jobstates import JobStatus
from app.db.base import utcnow
from app.db.session import transaction
from app.jobs.context import DbJobContext
from app.jobs.runtime import JobRuntime
from app.services import jobs


def take(rt: JobRuntime, job_id: str, work_dir: Path) -> DbJobContext:
    """What run_job does when it wins a delivery: QUEUED -> STARTING -> RUNNING as this runtime."""
    with transaction(rt.db) as s:
        assert jobs.transition(session=s, job_id=job_id, sources=[JobStatus.QUEUED], target=JobStatus.STARTING,
                               worker_id=rt.worker_id, started_at=utcnow(), heartbeat_at=utcnow())  # fmt: skip
        attempt = jobs.get_job(session=s, job_id=job_id).attempt
        assert jobs.transition(session=s, job_id=job_id, sources=[JobStatus.STARTING], target=JobStatus.RUNNING)
    running = rt.running.add(job_id, attempt)
    assert running is not None
    return DbJobContext(rt, job_id, attempt, running, work_dir)
