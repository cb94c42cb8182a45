"""The export cache (``training.data_path: export``): prepared tensors kept for later jobs on the same data.

The first job with ``data_path: export`` prepares the rows as a direct job does and every barrier task also
writes its shard under ``<export_root>/<export_key>/``; when no task failed, the driver writes
``manifest.json`` there (the row counts, the normalizer, the job that made it). A later job whose
:func:`export_key` is the same, and whose manifest exists, skips the preparation: the stage runs on one
placeholder row per worker and every task reads its shard back. A key covers the data files (name, size,
modification time), how they are read and split, and the number of workers; remote data is never exported.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from workers.context import JobContext
from workers.data.normalize import Normalizer
from workers.training.torch.config import TorchPlan
from workers.training.torch.prepare import prepare

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

EXPORT_VERSION = 3
"""2: the split of local parquet is a hash of the row's place in the files; 3: sequences' lengths and label masks."""
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class StageInput:
    """What the barrier stage trains on and how the tasks get their tensors."""

    frame: DataFrame
    """prepared rows (direct, write) or one placeholder row per worker (read)"""
    rows: dict[str, int] | None
    """None: the barrier tasks count them (:func:`workers.data.arrow_read.check_share`)"""
    normalizer: Normalizer | None
    export_dir: Path | None
    export_mode: Literal["write", "read"] | None
    """None: tensors from the rows; write: from the rows, and saved; read: from a saved export"""
    source: dict[str, Any] | None = None
    """the files each task reads its share of itself (:mod:`workers.data.arrow_read`); the rows are placeholders"""
    input_example: list[Any] | None = None
    """read: the model card's input example the export was made with (the same files and settings give the same
    rows), so a job on an export runs no Spark job of its own before its stage; None: read it from the data"""


def _files(path: str) -> list[tuple[str, int, int]] | None:
    """(name, size, mtime) of the files behind a local dataset path; None for remote URIs."""
    if "://" in path and not path.startswith("file:"):
        return None
    root = Path(path.removeprefix("file://"))
    found = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in found]


def export_key(plan: TorchPlan) -> str | None:
    """What the exported tensors depend on: the data files, how they are read and split, the workers."""
    fingerprint: list[Any] = [EXPORT_VERSION]
    for ds in (plan.train, plan.validation):
        if ds is None:
            fingerprint.append(None)
            continue
        files = _files(ds.path)
        if files is None:
            return None
        fingerprint.append([ds.to_dict(), files])
    fingerprint.append([plan.num_workers, list(plan.input_shape), plan.array_column, plan.class_labels,
                        plan.validation_fraction])  # fmt: skip
    if plan.categorical:  # (appended only here: the keys of exports without categories stay what they were)
        fingerprint.append(plan.categorical)
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True, default=str).encode()).hexdigest()[:24]


def stage_input(ctx: JobContext, plan: TorchPlan) -> StageInput:
    """The barrier stage's input: prepared rows (direct, or export-and-write), or placeholders when an export of
    the same data already exists (read)."""
    key = export_key(plan) if plan.data_path == "export" and plan.export_root else None
    export_dir = Path(plan.export_root or "") / key if key else None
    manifest = export_dir / MANIFEST if export_dir else None
    if manifest is not None and manifest.exists():
        saved = json.loads(manifest.read_text())
        # not the job that made them: it may be another owner's (the files are shared, the job is not); the
        # manifest beside the tensors names it for an operator
        ctx.log(f"training from exported tensors {key} (made earlier from the same files and settings)")
        normalizer = Normalizer.from_dict(saved["normalizer"]) if saved["normalizer"] else None
        placeholders = ctx.spark.range(0, plan.num_workers, 1, plan.num_workers)  # one per worker, no shuffle
        example = saved.get("input_example")  # absent from exports made before it was saved there
        return StageInput(placeholders, saved["rows"], normalizer, export_dir, "read", input_example=example)
    frame, rows, normalizer, source = prepare(ctx, plan)
    return StageInput(frame, rows, normalizer, export_dir, "write" if export_dir else None, source)


def write_manifest(data: StageInput, job_id: str, input_example: list[Any] | None = None) -> None:
    """After a stage that wrote an export: mark it complete, for later jobs (with the model card's input example
    when there is one to keep)."""
    assert data.export_dir is not None
    normalizer = data.normalizer.to_dict() if data.normalizer else None
    manifest: dict[str, Any] = {"rows": data.rows, "normalizer": normalizer, "job_id": job_id}
    if input_example is not None:
        manifest["input_example"] = input_example
    # renamed into place: another job on the same data may be reading it (or writing its own) at this moment
    tmp = data.export_dir / f".{MANIFEST}.{job_id}.tmp"
    tmp.write_text(json.dumps(manifest))
    os.replace(tmp, data.export_dir / MANIFEST)
