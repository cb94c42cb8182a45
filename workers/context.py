"""What a family driver (``workers/training/<family>/driver.py``) gets from the job runner, and what it returns.

Drivers run on the driver process, inside a Celery consumer thread that already holds the Spark job group of
the job. They report through :class:`JobContext` and never touch the database, Celery or HTTP themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class JobCancelled(Exception):
    """Raised by :meth:`JobContext.check_cancelled` once a cancel was requested."""


class JobFailure(Exception):
    """A failure with a stable machine-readable ``reason`` (shown as ``error.reason`` on the job)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class MetricPoint:
    key: str
    value: float
    step: int
    epoch: int | None = None
    worker: int | None = None


@dataclass(frozen=True)
class ModelArtifact:
    """A trained model saved under the artifact root, to be registered as a new version."""

    framework: str
    uri: str
    metrics: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobOutcome:
    result: dict[str, Any]
    model: ModelArtifact | None = None


class JobContext(Protocol):
    job_id: str
    attempt: int
    spark: SparkSession
    work_dir: Path
    """A directory for this job's artifacts (under the artifact root)."""
    store: str | None
    """Where finished models and checkpoints are published (a URI), or None to keep them in ``work_dir``."""

    def progress(self, fraction: float, message: str | None = None) -> None: ...

    def metrics(self, points: Iterable[MetricPoint]) -> None: ...

    def log(self, message: str, level: str = "INFO") -> None: ...

    def warn(self, message: str) -> None:
        """Record a warning on the job (visible in ``warnings``) and in its log."""
        ...

    def checkpoint(
        self, epoch: int, step: int, uri: str, metrics: dict[str, Any], *, keep_epoch: int | None = None
    ) -> str:
        """Register a complete checkpoint of this job (one per epoch; a replayed epoch replaces the row).
        ``keep_epoch``: a checkpoint the job still needs whatever the retention (early stopping's best epoch)."""
        ...

    @property
    def cancelled(self) -> bool: ...

    def check_cancelled(self) -> None: ...

    def cancel_grace(self, seconds: float) -> AbstractContextManager[None]:
        """While open: a cancel gives the job up to ``seconds`` to stop by itself (its workers are told to stop at
        their next step) before its Spark jobs are killed. A task that ends by itself keeps its Python worker,
        which the next job reuses; a killed one is gone after Spark's kill timeout."""
        ...
