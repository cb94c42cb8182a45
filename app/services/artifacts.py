"""Downloadable archives of model versions and checkpoints (``.tar.gz``), streamed without holding them in
memory. A torch archive carries ``sparktrain_model.py``, which loads it with plain torch + safetensors."""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from app.core.errors import NotFound
from app.db.models import Checkpoint, ModelVersion
from workers.storage import fetch_dir

STANDALONE = Path(__file__).resolve().parents[2] / "workers" / "inference" / "standalone.py"
CHUNK = 1 << 20
README = """This is a sparktrain model: spec.json (network, columns, classes, normalizer) and weights.safetensors.

Load it without sparktrain (needs torch, numpy, safetensors):

    import sparktrain_model
    model = sparktrain_model.load(".")
    print(model.predict([[...one row of features...]]))

Nothing in this archive is a pickle; sparktrain_model.py says what every field means.
"""


def _stream(members: list[tuple[str, Path | bytes]]) -> Iterator[bytes]:
    spool = tempfile.SpooledTemporaryFile(max_size=64 << 20)  # noqa: SIM115 (closed by the generator)
    with tarfile.open(fileobj=spool, mode="w:gz") as tar:
        for name, source in members:
            if isinstance(source, Path):
                tar.add(source, arcname=name)
            else:
                info = tarfile.TarInfo(name)
                info.size = len(source)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(source))
    spool.seek(0)

    def chunks() -> Iterator[bytes]:
        with spool:
            while chunk := spool.read(CHUNK):
                yield chunk

    return chunks()


def _files(directory: Path, prefix: str) -> list[tuple[str, Path | bytes]]:
    if not directory.is_dir():
        raise NotFound(f"The files of this artifact are gone from {directory}.")
    return [(f"{prefix}/{p.relative_to(directory)}", p) for p in sorted(directory.rglob("*")) if p.is_file()]


def model_archive(version: ModelVersion) -> Iterator[bytes]:
    prefix = f"{version.model.name}-v{version.version}"
    members = _files(fetch_dir(version.artifact_uri), prefix)
    card = {
        "name": version.model.name,
        "version": version.version,
        "framework": version.framework,
        "metrics": version.metrics,
        "params": version.params,
        "job_id": version.job_id,
        "created_at": version.created_at.isoformat(),
    }
    members.append((f"{prefix}/metrics.json", json.dumps(card, indent=1).encode()))
    if version.framework == "torch" and STANDALONE.exists():
        members += [(f"{prefix}/sparktrain_model.py", STANDALONE), (f"{prefix}/README.txt", README.encode())]
    return _stream(members)


def checkpoint_archive(row: Checkpoint) -> Iterator[bytes]:
    prefix = f"checkpoint-{row.job_id[:8]}-epoch-{row.epoch}"
    members = _files(fetch_dir(row.uri), prefix)
    meta = {"id": row.id, "job_id": row.job_id, "epoch": row.epoch, "step": row.step, "metrics": row.metrics}
    members.append((f"{prefix}/checkpoint.json", json.dumps(meta, indent=1).encode()))
    return _stream(members)
