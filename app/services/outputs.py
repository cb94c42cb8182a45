"""Batch prediction outputs are private to their owner.

A batch prediction writes into the data roots, and files there belong to no one (docs/security.md): any key could
read another owner's predictions by naming the output directory as a dataset. So each prediction job records the
path it writes (``Job.output_path``, and its SHA-256 ``output_key``, indexed), and every local dataset path that a
caller who is not an admin names (``/train``, ``/tune``, ``/evaluate``, ``/predict``, ``POST /datasets``) is
checked against those records before it is planned:

- a path at or inside another owner's output, or inside the hidden directory a prediction writes before it renames
  it into place (``.<name>.partial-<job>-<attempt>``), answers exactly as a path that does not exist;
- a directory that holds another owner's output is refused: Spark would read that output with the rest (through
  ``recursiveFileLookup``), and no answer can pretend that the directory is not there.

When two jobs recorded the same path (the first output was deleted and the path written again), the newest job
decides. A new ``output_uri`` may not lie inside an output that is there or about to be written (anyone's: Spark
would write a directory into a dataset), nor be the path that a queued or running prediction is about to write.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.errors import ValidationFailed
from app.core.jobstates import JobStatus, JobType
from app.db.models import Job
from app.services.datasets.paths import missing

ACTIVE = (JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.CANCELLING)
_PARTIAL = re.compile(r"^\..+\.partial-([0-9a-f]{32})-\d+$")
"""The private directory a batch prediction writes before the rename (workers/inference/batch.py)."""


def key(path: str) -> str:
    """What ``Job.output_key`` holds for ``path``."""
    return hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()


def _newest(session: Session, paths: Sequence[str]) -> dict[str, Job]:
    """The newest prediction job recorded for each of ``paths`` that any job recorded."""
    if not paths:
        return {}
    rows = session.scalars(select(Job).where(Job.output_key.in_([key(p) for p in paths])).order_by(Job.created_at))
    return {row.output_path: row for row in rows if row.output_path is not None and row.output_path in paths}


def _within(session: Session, directory: Path, owner: str) -> list[str]:
    """Outputs of other owners' jobs that lie below ``directory``."""
    prefix = str(directory).rstrip("/") + "/"
    pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    below = session.scalars(
        select(Job.output_path)
        .where(Job.type == JobType.PREDICT, Job.owner != owner, Job.output_path.like(pattern, escape="\\"))
        .distinct()
    )
    return [p for p in below if p is not None and p.startswith(prefix)]  # SQLite's LIKE ignores case


def check_read(session: Session, *, path: str, owner: str, uri: str, roots: Sequence[Path], loc: str) -> None:
    """``owner`` may read the dataset at ``path`` (resolved; a remote URI passes): it is not, and does not hold,
    another owner's batch prediction output."""
    target = Path(path)
    if not target.is_absolute():
        return
    for part in target.parts:
        partial = _PARTIAL.match(part)
        if partial is not None:
            job = session.get(Job, partial.group(1))
            if job is not None and job.owner != owner:
                raise missing(uri, roots, loc)
    ancestors = [str(target), *(str(p) for p in target.parents)]
    if any(job.owner != owner for job in _newest(session, ancestors).values()):
        raise missing(uri, roots, loc)
    held = _newest(session, _within(session, target, owner))
    if any(job.owner != owner and Path(p).exists() for p, job in held.items()):
        raise ValidationFailed.at(
            loc, f"{uri!r} holds another owner's batch prediction output; name a path that does not hold it"
        )


def check_target(session: Session, *, target: str, given: str, loc: str = "output_uri") -> None:
    """A new batch prediction output at ``target`` (resolved) does not land inside another prediction's output
    and is not where a queued or running one will write."""
    path = Path(target)
    recorded = _newest(session, [str(path), *(str(p) for p in path.parents)])
    for where, job in recorded.items():
        if where == str(path):
            if job.status in ACTIVE:
                raise ValidationFailed.at(loc, f"{given[:200]!r} is where a queued batch prediction will write; "
                                          "name a new path")  # fmt: skip
        elif job.status in ACTIVE or Path(where).exists():
            raise ValidationFailed.at(
                loc, f"{given[:200]!r} lies inside the output of a batch prediction; name a path outside it"
            )
