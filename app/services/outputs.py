"""Batch prediction outputs are private to their owner.

A batch prediction writes into the data roots, and files there belong to no one (docs/security.md): any key could
read another owner's predictions by naming the output directory as a dataset. So each prediction job records the
path it writes (``Job.output_path``, and its SHA-256 ``output_key``, indexed), and every local dataset path that a
caller who is not an admin names (``/train``, ``/tune``, ``/evaluate``, ``/predict``, ``POST /datasets``) is
checked against those records before it is planned:

- a path at or inside another owner's output, or inside the hidden directories beside it (the one a prediction
  writes before it renames it into place, ``.<name>.partial-<job>-<attempt>``, and the one a retry moves an
  earlier output aside to, ``.<name>.old-<hex>``), answers exactly as a path that does not exist;
- a directory that holds another owner's output, written or about to be, is refused: Spark would read that output
  with the rest, and no answer can pretend that the directory is not there.

Whose an output is: the owner of the job whose id the output's marker file names (the job that wrote it), else of
the newest job recorded for the path that is queued, running or succeeded (a failed or cancelled one wrote
nothing). Jobs check again when they start (:func:`check_job`), for outputs recorded after they were queued: a
directory that held nothing private when the request was checked may hold another owner's output by then.

A new ``output_uri`` may not lie inside an output (written or about to be: Spark would write a directory into a
dataset), nor hold or be the path of a queued or running prediction. That check and the insert of the job that
claims the path are one step (:func:`claim`): two predictions sent at once to one path were both queued, and the
later one replaced the other's finished output.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import ServiceUnavailable, ValidationFailed
from app.core.jobstates import JobStatus, JobType
from app.db.models import Job
from app.services.datasets.paths import links_below, missing
from workers.data.spec import ResolvedDataset
from workers.inference.spec import OUTPUT_MARKER

ACTIVE = (JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.CANCELLING)
LIVE = (*ACTIVE, JobStatus.SUCCEEDED)
"""Jobs whose output is there or about to be."""
_BESIDE = re.compile(r"\.(.+)\.(?:partial-([0-9a-f]{32})-\d+|old-[0-9a-f]{8})", re.S)
"""The hidden directories next to an output (workers/inference/batch.py, workers/storage.py)."""


def key(path: str) -> str:
    """What ``Job.output_key`` holds for ``path``."""
    return hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()


def _recorded(session: Session, paths: Sequence[str], since: datetime | None = None) -> dict[str, list[Job]]:
    """The prediction jobs recorded for each of ``paths`` (those queued after ``since``), oldest first."""
    if not paths:
        return {}
    query = select(Job).where(Job.output_key.in_([key(p) for p in paths])).order_by(Job.created_at)
    if since is not None:
        query = query.where(Job.created_at > since)
    found: dict[str, list[Job]] = {}
    for row in session.scalars(query):
        if row.output_path is not None and row.output_path in paths:
            found.setdefault(row.output_path, []).append(row)
    return found


def _owner(session: Session, path: str, records: list[Job]) -> str | None:
    """Whose the output at ``path`` is: its marker's job's owner, else the newest live record's; None: nobody's."""
    try:
        writer = (Path(path) / OUTPUT_MARKER).read_text().strip()
    except (OSError, UnicodeDecodeError):
        writer = ""
    job = session.get(Job, writer) if writer else None
    if job is not None:
        return job.owner
    live = [row for row in records if row.status in LIVE]
    return live[-1].owner if live else None


def _below(session: Session, directory: Path, *, statuses: Sequence[str], since: datetime | None) -> list[str]:
    """Recorded outputs below ``directory`` of jobs in ``statuses``."""
    prefix = str(directory).rstrip("/") + "/"
    pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    query = select(Job.output_path).where(
        Job.type == JobType.PREDICT, Job.status.in_(statuses), Job.output_path.like(pattern, escape="\\")
    )
    if since is not None:
        query = query.where(Job.created_at > since)
    return sorted({p for p in session.scalars(query) if p is not None and p.startswith(prefix)})  # LIKE ignores case


def check_read(
    session: Session, *, path: str, owner: str, uri: str, roots: Sequence[Path], loc: str, since: datetime | None = None
) -> None:
    """``owner`` may read the dataset at ``path`` (resolved; a remote URI passes): it is not, and does not hold,
    another owner's batch prediction output (of a job queued after ``since``, when given)."""
    target = Path(path)
    if not target.is_absolute():
        return
    places = [target, *target.parents]
    matches = [(p, m) for p in places if (m := _BESIDE.fullmatch(p.name))]
    for _, m in matches:  # a private directory names the job that writes it
        writer = session.get(Job, m.group(2)) if m.group(2) else None
        if writer is not None and writer.owner != owner and (since is None or writer.created_at > since):
            raise missing(uri, roots, loc)
    beside = [p.parent / m.group(1) for p, m in matches]
    candidates = [str(p) for p in (*places, *beside)]
    for where, records in _recorded(session, candidates, since).items():
        if _owner(session, where, records) not in (None, owner):
            raise missing(uri, roots, loc)
    _holds_none(session, target, owner=owner, uri=uri, loc=loc, since=since)
    linked = links_below(target, roots, uri, loc)
    if linked:  # links in a dataset directory: Spark reads what they lead to (a link made after the request too)
        around = sorted({str(p) for link in linked for p in (link, *link.parents)})
        recorded = {
            k: v for i in range(0, len(around), 500) for k, v in _recorded(session, around[i : i + 500]).items()
        }
        if any(_owner(session, where, rows) not in (None, owner) for where, rows in recorded.items()):
            raise ValidationFailed.at(loc, f"{uri!r} holds a link to another owner's batch prediction output; name "
                                      "a path that does not hold it")  # fmt: skip
        for directory in sorted({link for link in linked if link.is_dir()}):
            _holds_none(session, directory, owner=owner, uri=uri, loc=loc, since=None)


def _holds_none(session: Session, target: Path, *, owner: str, uri: str, loc: str, since: datetime | None) -> None:
    """A 422 when ``target`` holds another owner's batch prediction output."""
    below = _below(session, target, statuses=LIVE, since=since)
    for where, records in _recorded(session, below).items():
        if _owner(session, where, records) not in (None, owner) and (Path(where).exists() or records[-1].status
                                                                      in ACTIVE):  # fmt: skip
            raise ValidationFailed.at(
                loc, f"{uri!r} holds another owner's batch prediction output; name a path that does not hold it"
            )


def check_target(session: Session, *, target: str, given: str, loc: str = "output_uri") -> None:
    """A new batch prediction output at ``target`` (resolved) does not land inside another prediction's output,
    hold one that a queued or running prediction will write, or take the path of one."""
    path = Path(target)
    for where, records in _recorded(session, [str(path), *(str(p) for p in path.parents)]).items():
        active = any(row.status in ACTIVE for row in records)
        if where == str(path) and active:
            raise ValidationFailed.at(loc, f"{given[:200]!r} is where a queued batch prediction will write; "
                                      "name a new path")  # fmt: skip
        if where != str(path) and (active or Path(where).exists()):
            raise ValidationFailed.at(
                loc, f"{given[:200]!r} lies inside the output of a batch prediction; name a path outside it"
            )
    if _below(session, path, statuses=ACTIVE, since=None):
        raise ValidationFailed.at(loc, f"{given[:200]!r} would hold the output of a queued batch prediction; "
                                  "name another path")  # fmt: skip


_CLAIMING = threading.Lock()
"""This process's submissions of batch predictions, one at a time from :func:`check_target` to the job's insert."""
CLAIM_LOCK = int.from_bytes(hashlib.sha256(b"sparktrain: batch prediction outputs").digest()[:8], "big", signed=True)
"""The PostgreSQL advisory lock every driver on the database takes for the same step."""
CLAIM_WAIT_S = 60.0


@contextmanager
def claim(db: sessionmaker[Session]) -> Iterator[None]:
    """While open, no other submission of a batch prediction checks an output path or records one: open it around
    :func:`check_target` and the insert of the job, so that of two predictions sent at once to one path (or to a
    path inside the other's) the second sees the first's job and is refused. Within a process a lock does it
    (SQLite's only writer is the one driver); on PostgreSQL a session advisory lock on a connection of its own
    does it for every driver, taken after the process lock so that one connection per driver waits at most."""
    if not _CLAIMING.acquire(timeout=CLAIM_WAIT_S):
        raise ServiceUnavailable("Other batch predictions are being submitted; try again in a moment.")
    try:
        bind = db.kw.get("bind")
        if bind is None or bind.dialect.name != "postgresql":
            yield
            return
        with bind.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:  # never idle in a transaction
            conn.execute(text("SELECT set_config('lock_timeout', :t, false)"), {"t": f"{CLAIM_WAIT_S:.0f}s"})
            try:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": CLAIM_LOCK})
            except OperationalError as exc:  # another driver held it all that time
                raise ServiceUnavailable("Other batch predictions are being submitted; try again in a moment.") from exc
            finally:
                conn.execute(text("RESET lock_timeout"))
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": CLAIM_LOCK})
    finally:
        _CLAIMING.release()


def _datasets(value: Any) -> Iterator[ResolvedDataset]:
    if isinstance(value, ResolvedDataset):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from _datasets(getattr(value, field.name))
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _datasets(item)


def check_job(session: Session, *, job_id: str, owner: str, plan: Any, roots: Sequence[Path]) -> None:
    """When a job starts: the data its plan reads has not become another owner's output since it was queued (its
    tune job's queue time for a trial, as the request's checks covered the whole search)."""
    row = session.get(Job, job_id)
    if row is None:
        return
    parent = session.get(Job, row.parent_id) if row.parent_id else None
    since = (parent or row).created_at
    for ds in _datasets(plan):
        for path in (ds.path, ds.labels_path):
            if path:
                check_read(session, path=path, owner=owner, uri=path, roots=roots, loc="dataset", since=since)
