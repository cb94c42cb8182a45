"""The driver's side of xgboost checkpoints: while the fit runs, register every checkpoint the training task writes.

The task (remote.py) writes the booster every ``checkpoint_rounds`` rounds as ``round-<n>-<run>`` under the job's
checkpoint directory (on the store when there is one, else under the job's work directory), complete or not at all.
:class:`RoundCheckpoints` watches that directory and registers each new one of its own run as the job's checkpoint
for round ``n`` (``ctx.checkpoint``: one per job and round; a replayed round replaces the row). Directories left by
a run of the job that died (partial writes, rounds past the one this attempt continues from) are removed first.
Beside each booster is the job's card (what the trees were trained on), which a new job that continues it
(``training.resume_from``) is checked against when it is planned; that job one-hot encodes with the checkpoint's
categories (:func:`encode`). A checkpoint's card also holds a fingerprint of the data its job's validation rows
came from (:func:`data_fingerprint`): early stopping's best score carries into that job only when the data is
unchanged (app/services/planning/xgboost_resume.py).

Driver side: stdlib and workers.storage (pyspark only inside :func:`workers.data.one_hot.expand`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import uuid
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

from workers import storage
from workers.context import JobCancelled, JobContext
from workers.data.categories import Categories
from workers.data.one_hot import Encoded, expand, one_hot
from workers.training.xgboost.remote import parse_checkpoint_name
from workers.training.xgboost.spec import XGBoostPlan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)
CheckpointTarget = tuple[str, int, str, str] | None
"""(directory, every, run, card as JSON) handed to the training task; None: no checkpoints."""
POLL_S = 0.5
VALIDATION_DATA = "validation_data"
"""The checkpoint card's key for :func:`data_fingerprint` of the data its job's validation rows came from."""


def checkpoint_dir(ctx: JobContext) -> str:
    if ctx.store:
        return storage.join(ctx.store, "jobs", ctx.job_id, "checkpoints")
    return str(ctx.work_dir / "checkpoints")


def data_fingerprint(path: str) -> dict[str, Any] | None:
    """A cheap fingerprint of the data at ``path`` (a file, or a directory of files as Spark reads it): how many
    files, their bytes, and a digest of each one's name, size and modification time (ns), read from the file
    system without reading the data. An overwritten file has another modification time. None when it cannot be
    listed."""
    try:
        files = _remote_files(path) if storage.is_remote(path) else _local_files(storage.local_path(path))
    except OSError:
        return None
    digest = hashlib.sha256(json.dumps(sorted(files)).encode()).hexdigest()[:16]
    return {"files": len(files), "bytes": sum(size for _, size, _ in files), "digest": digest}


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))  # what Spark's readers skip (_SUCCESS, .crc files)


def _local_files(path: os.PathLike[str] | str) -> list[tuple[str, int, int]]:
    if os.path.isfile(path):
        stat = os.stat(path)
        return [(os.path.basename(path), stat.st_size, stat.st_mtime_ns)]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"nothing at {path}")
    out = []
    for root, dirs, names in os.walk(path, followlinks=True):
        dirs[:] = [d for d in dirs if not _hidden(d)]
        for name in names:
            if not _hidden(name):
                stat = os.stat(os.path.join(root, name))
                out.append((os.path.relpath(os.path.join(root, name), path), stat.st_size, stat.st_mtime_ns))
    return out


def _remote_files(uri: str) -> list[tuple[str, int, int]]:
    from pyarrow import fs

    filesystem, base = fs.FileSystem.from_uri(uri)
    info = filesystem.get_file_info(base)
    if info.type == fs.FileType.File:
        return [(info.base_name, info.size or 0, info.mtime_ns or 0)]
    out = []
    for found in filesystem.get_file_info(fs.FileSelector(base, recursive=True)):
        name = found.path[len(base) :].lstrip("/")
        if found.type == fs.FileType.File and not any(_hidden(part) for part in name.split("/")):
            out.append((name, found.size or 0, found.mtime_ns or 0))
    return out


def resumed_rounds(ctx: JobContext, plan: XGBoostPlan) -> int:
    """Rounds the job's checkpoint already holds (0 without one), said in the job's log."""
    resume = plan.resume
    if resume is None:
        return 0
    source = f" of job {resume.job_id} (training.resume_from)" if resume.job_id != ctx.job_id else ""
    ctx.log(f"continuing from checkpoint {resume.checkpoint_id}{source} after {resume.rounds} of "
            f"{plan.spec.num_round} rounds")  # fmt: skip
    if not resume.keep_best and plan.spec.early_stopping_rounds is not None:
        ctx.log(
            "early stopping counts from this job's first round (the checkpoint's best score is not comparable: "
            "another metric, other validation rows, or validation data changed since; see the job's warnings)"
        )
    return resume.rounds


def encode(ctx: JobContext, plan: XGBoostPlan, frames: tuple[DataFrame, ...], fit_on: DataFrame) -> Encoded:
    """The one-hot columns of ``dataset.categorical``: fitted on the training rows, or, continuing another job's
    checkpoint, that checkpoint's (its trees split on them: a category this data lacks stays a column, a new one is
    all zeros)."""
    ds = plan.train
    if plan.categories is None or not ds.categorical:
        return one_hot(ctx, ds, frames, fit_on)
    categories = Categories.from_dict(plan.categories)
    ctx.log(f"one-hot encoded with the categories of the checkpoint it continues: {len(categories.names)} features")
    encoded = replace(ds, features=categories.names, categorical=())
    return Encoded(categories, ds, encoded, tuple(expand(categories, frame) for frame in frames))


class RoundCheckpoints:
    """``card``: what the booster was trained on, written beside it (a job that continues it is checked against it),
    with the fingerprint of the data the validation rows come from, taken as the fit starts."""

    def __init__(self, ctx: JobContext, plan: XGBoostPlan, card: dict[str, Any] | None = None) -> None:
        self._ctx = ctx
        self._every = plan.spec.checkpoint_rounds
        self._card = ""
        if card is not None and self._every > 0:
            validated = plan.validation.path if plan.validation is not None else plan.train.path
            self._card = json.dumps({**card, VALIDATION_DATA: data_fingerprint(validated)})
        self._kept = plan.resume.rounds if plan.resume else 0
        self._directory = checkpoint_dir(ctx)
        self._run = uuid.uuid4().hex[:12]
        self._seen: set[str] = set()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"xgb-checkpoints-{ctx.job_id[:8]}", daemon=True)

    @property
    def target(self) -> CheckpointTarget:
        return (self._directory, self._every, self._run, self._card) if self._every > 0 else None

    def __enter__(self) -> RoundCheckpoints:
        if self._every > 0:
            self._clear_dead_runs()
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._every <= 0:
            return
        self._halt.set()
        self._thread.join(timeout=30)
        with contextlib.suppress(JobCancelled):
            self._register_new()  # the last ones, also after a failed fit: the next attempt continues from them

    def _clear_dead_runs(self) -> None:
        """Partial writes, and rounds past the resume point, of runs that are not this one."""
        for name in storage.list_dir(self._directory):
            parsed = parse_checkpoint_name(name)
            if parsed is None or parsed[0] > self._kept:
                with contextlib.suppress(OSError):
                    storage.remove_dir(storage.join(self._directory, name))

    def _watch(self) -> None:
        while not self._halt.wait(POLL_S):
            try:
                self._register_new()
            except JobCancelled:
                return
            except Exception as exc:  # the database or the store is away: the next poll tries again
                log.warning("job %s: registering checkpoints failed (%s: %s)", self._ctx.job_id, type(exc).__name__,
                            exc)  # fmt: skip

    def _register_new(self) -> None:
        for name in storage.list_dir(self._directory):
            parsed = parse_checkpoint_name(name)
            if parsed is None or parsed[1] != self._run or name in self._seen:
                continue
            rounds = parsed[0]
            self._ctx.checkpoint(rounds, rounds, storage.join(self._directory, name), {"rounds": rounds})
            self._seen.add(name)
