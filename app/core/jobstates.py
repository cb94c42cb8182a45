"""The job state machine (docs/architecture.md): states, job types and the allowed transitions."""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    QUEUED = "QUEUED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"


class JobType(StrEnum):
    TRAIN = "train"
    EVALUATE = "evaluate"
    PREDICT = "predict"
    RECIPE = "recipe"
    """A named, self-contained Spark job that checks the cluster (``POST /recipes/gpu-smoke``)."""
    TUNE = "tune"
    """A hyperparameter search whose trials are child training jobs (``POST /tune``)."""


TERMINAL = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
ACTIVE = frozenset({JobStatus.STARTING, JobStatus.RUNNING, JobStatus.CANCELLING})

# Every allowed edge; a transition is one conditional UPDATE "... WHERE status IN (sources)".
EDGES: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.QUEUED: frozenset({JobStatus.STARTING, JobStatus.CANCELLED, JobStatus.FAILED}),
    JobStatus.STARTING: frozenset({JobStatus.RUNNING, JobStatus.CANCELLING, JobStatus.FAILED, JobStatus.QUEUED}),
    JobStatus.RUNNING: frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLING, JobStatus.QUEUED}),
    # A job that finishes while its cancel is on the way is reported as what it really did.
    JobStatus.CANCELLING: frozenset({JobStatus.CANCELLED, JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.QUEUED}),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset({JobStatus.QUEUED}),  # a retry of a resumable job (DRIVER_LOST)
    JobStatus.CANCELLED: frozenset(),
}
