"""Downloadable model versions and checkpoints, streamed without holding them in memory: the ``.tar.gz`` archive,
the MLflow model directory as a zip (``format=mlflow``), and a torch network as ONNX (``format=onnx``). A torch
archive carries ``sparktrain_model.py``, which loads it with plain torch + safetensors.

ONNX exports run in a subprocess (``python -m workers.inference.onnx_export``) on a thread of their own, one at a
time, never on a request's thread; each version's export is kept under ``<artifact_root>/onnx/`` and made once.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import IO, Any

from app.core.errors import NotFound, ServiceUnavailable, ValidationFailed
from app.db.models import Checkpoint, ModelVersion
from app.schemas.models import ARTIFACT_FORMATS, FAMILY_FORMATS
from workers.inference import mlflow_format
from workers.storage import discard_dir, fetch_dir

STANDALONE = Path(__file__).resolve().parents[2] / "workers" / "inference" / "standalone.py"
CHUNK = 1 << 20
EXPORT_TIMEOUT_S = 600
EXPORT_WAIT_S = 30
"""How long one download request waits for a running ONNX export before it answers 503 with Retry-After (a request
thread is not held for the whole export; ``curl --retry`` honours the header)."""
EXPORT_ERROR_EXIT = 3  # workers.inference.onnx_export's exit status for a network ONNX cannot express
ONNX_FILES = ("model.onnx", "sparktrain_onnx.json")  # what that module writes (it imports torch: not here)
README = """This is a sparktrain model: spec.json (network, columns, classes, normalizer) and weights.safetensors.

Load it without sparktrain (needs torch, numpy, safetensors):

    import sparktrain_model
    model = sparktrain_model.load(".")
    print(model.predict([[...one row of features...]]))

It is also an MLflow model directory (MLmodel): mlflow.pyfunc.load_model(".") or `mlflow models serve -m .`.
Nothing in this archive is a pickle; sparktrain_model.py says what every field means.
"""

Members = list[tuple[str, Path | bytes]]


def check_format(version: ModelVersion, fmt: str) -> None:
    """A format this version's family has, or a 422 that says which formats it has."""
    formats = FAMILY_FORMATS.get(version.framework, ("archive",))
    if fmt not in ARTIFACT_FORMATS:
        raise ValidationFailed.at(
            "format",
            f"unknown format {fmt!r}; {version.framework} models download as {' or '.join(formats)}",
            source="query",
        )
    if fmt not in formats:
        raise ValidationFailed.at(
            "format",
            f"{version.framework} models download as {' or '.join(formats)}; onnx is for torch networks",
            source="query",
        )


def _spool(write: Any) -> Iterator[bytes]:
    spool = tempfile.SpooledTemporaryFile(max_size=64 << 20)  # noqa: SIM115 (closed by the generator)
    write(spool)
    spool.seek(0)

    def chunks() -> Iterator[bytes]:
        with spool:
            while chunk := spool.read(CHUNK):
                yield chunk

    return chunks()


def _stream(members: Members) -> Iterator[bytes]:
    def write(spool: IO[bytes]) -> None:
        with tarfile.open(fileobj=spool, mode="w:gz") as tar:
            for name, source in members:
                if isinstance(source, Path):
                    tar.add(source, arcname=name)
                else:
                    info = tarfile.TarInfo(name)
                    info.size = len(source)
                    info.mode = 0o644
                    tar.addfile(info, io.BytesIO(source))

    return _spool(write)


def _zip(members: Members) -> Iterator[bytes]:
    def write(spool: IO[bytes]) -> None:
        with zipfile.ZipFile(spool, mode="w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name, source in members:
                if isinstance(source, Path):
                    archive.write(source, arcname=name)
                else:
                    archive.writestr(name, source)

    return _spool(write)


def _files(directory: Path, prefix: str) -> Members:
    if not directory.is_dir():
        raise NotFound(f"The files of this artifact are gone from {directory}.")
    return [(f"{prefix}/{p.relative_to(directory)}", p) for p in sorted(directory.rglob("*")) if p.is_file()]


def _card_json(version: ModelVersion) -> bytes:
    card = {
        "name": version.model.name,
        "version": version.version,
        "framework": version.framework,
        "metrics": version.metrics,
        "params": version.params,
        "job_id": version.job_id,
        "created_at": version.created_at.isoformat(),
    }
    return json.dumps(card, indent=1).encode()


def _prefix(version: ModelVersion) -> str:
    return f"{version.model.name}-v{version.version}"


def model_archive(version: ModelVersion) -> Iterator[bytes]:
    prefix = _prefix(version)
    members = _files(fetch_dir(version.artifact_uri), prefix)
    members.append((f"{prefix}/metrics.json", _card_json(version)))
    if version.framework == "torch" and STANDALONE.exists():
        members += [(f"{prefix}/sparktrain_model.py", STANDALONE), (f"{prefix}/README.txt", README.encode())]
    return _stream(members)


def mlflow_zip(version: ModelVersion) -> Iterator[bytes]:
    """The version's directory as an MLflow model, zipped under ``<name>-v<version>/``. A version trained before
    the directory held the MLflow files gets them now: its signature derived from its feature names, its
    requirements this service's versions (``metadata.sparktrain.requirements_recorded: false`` in ``MLmodel``)."""
    prefix = _prefix(version)
    directory = fetch_dir(version.artifact_uri)
    members = _files(directory, prefix)
    if not (directory / mlflow_format.MLMODEL).is_file():
        card = dict(version.params)
        if version.framework == "torch" and (directory / "spec.json").is_file():
            card = json.loads((directory / "spec.json").read_text())
        files = mlflow_format.mlflow_files(version.framework, card, examples=[], recorded_requirements=False)
        members += [(f"{prefix}/{name}", content) for name, content in files.items()]
    members.append((f"{prefix}/metrics.json", _card_json(version)))
    return _zip(members)


class _Exports:
    """ONNX exports, one at a time on their own thread; one export per version however many requests ask."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._running: dict[str, Future[Path]] = {}

    def get(self, key: str, run: Any) -> Future[Path]:
        """The export of ``key``: running, done, or started now. A network ONNX cannot express stays refused; an
        export that failed otherwise (a timeout, a crash) is tried again."""
        with self._lock:
            future = self._running.get(key)
            failed = future is not None and future.done() and future.exception() is not None
            if future is None or (failed and not isinstance(future.exception(), ValidationFailed)):
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="onnx-export")
                future = self._pool.submit(run)
                self._running[key] = future
            # An export that succeeded is on disk (``_export`` returns at once for it): forget its future, so the
            # table holds only running exports and refusals, not one entry per version ever downloaded.
            for done in [k for k, f in self._running.items() if k != key and f.done() and f.exception() is None]:
                del self._running[done]
            return future


_EXPORTS = _Exports()


def _export(model_dir: Path, target: Path, still_there: Callable[[], bool]) -> Path:
    """Export into a private directory and rename it into place: a half-written export is never served.

    A version deleted while its export ran leaves nothing: the delete removes the export's directory after its
    commit, and the export, once renamed into place, asks the database (``still_there``, a new transaction) whether
    the version is there. Either the delete's removal comes after the rename and removes it, or the delete committed
    before the question and the export removes itself; a 404 then says the version is gone."""
    if (target / ONNX_FILES[0]).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    private = Path(tempfile.mkdtemp(prefix=f"{target.name}.partial-", dir=target.parent))
    try:
        run = subprocess.run(
            [sys.executable, "-m", "workers.inference.onnx_export", str(model_dir), str(private)],
            capture_output=True,
            text=True,
            timeout=EXPORT_TIMEOUT_S,
            check=False,
            cwd=Path(__file__).resolve().parents[2],
        )
        if run.returncode == EXPORT_ERROR_EXIT:
            problem = json.loads(run.stdout.strip().splitlines()[-1])
            raise ValidationFailed.at(
                "format", f"this network cannot be exported to ONNX: {problem['layer']}: {problem['message']}"
            )
        if run.returncode != 0:
            tail = (run.stderr or "").strip().splitlines()[-3:]
            raise RuntimeError(f"the ONNX export failed (exit {run.returncode}): {' | '.join(tail)}")
        try:
            os.replace(private, target)
        except OSError:  # another driver put the same export there first
            if not (target / ONNX_FILES[0]).is_file():
                raise
    finally:
        shutil.rmtree(private, ignore_errors=True)
    if not still_there():
        discard_dir(target)
        raise NotFound("The model version was deleted while its ONNX export ran; nothing of it is kept.")
    return target


def onnx_dir(row_id: int, name: str, number: int, uri: str, *, artifact_root: Path) -> Path:
    """Where a version's ONNX export is kept (deleting the version removes it too)."""
    digest = hashlib.sha256(f"{row_id}:{uri}".encode()).hexdigest()[:16]
    return artifact_root / "onnx" / f"{name}-v{number}-{digest}"


def onnx_zip(version: ModelVersion, *, artifact_root: Path, still_there: Callable[[], bool]) -> Iterator[bytes]:
    """``model.onnx`` and its sidecar (``sparktrain_onnx.json``), zipped under ``<name>-v<version>-onnx/``. The
    calling thread waits for the export thread (:class:`_Exports`). ``still_there``: whether the version is still
    registered, asked in a new transaction once the export is in place (:func:`_export`)."""
    target = onnx_dir(
        version.id, version.model.name, version.version, version.artifact_uri, artifact_root=artifact_root
    )
    model_dir = fetch_dir(version.artifact_uri)
    if not (model_dir / "spec.json").is_file():
        raise NotFound(f"The files of this artifact are gone from {model_dir}.")
    export = _EXPORTS.get(str(target), lambda: _export(model_dir, target, still_there))
    try:
        done = export.result(timeout=EXPORT_WAIT_S)
    except FutureTimeout:
        raise ServiceUnavailable(
            f"The ONNX export of {version.model.name} version {version.version} is still running; ask again in a "
            "few seconds (the export runs once, later downloads are served from it).",
            headers={"Retry-After": "10"},
        ) from None
    except subprocess.TimeoutExpired:
        raise ServiceUnavailable(
            f"The ONNX export of {version.model.name} version {version.version} took longer than "
            f"{EXPORT_TIMEOUT_S} s and was stopped; the next download tries it again.",
            headers={"Retry-After": "10"},
        ) from None
    prefix = f"{_prefix(version)}-onnx"
    try:
        return _zip([(f"{prefix}/{name}", done / name) for name in ONNX_FILES])
    except FileNotFoundError:  # a delete removed it just now
        raise NotFound(f"{version.model.name} version {version.version} was deleted while it was read.") from None


def checkpoint_archive(row: Checkpoint) -> Iterator[bytes]:
    prefix = f"checkpoint-{row.job_id[:8]}-epoch-{row.epoch}"
    members = _files(fetch_dir(row.uri), prefix)
    meta = {"id": row.id, "job_id": row.job_id, "epoch": row.epoch, "step": row.step, "metrics": row.metrics}
    members.append((f"{prefix}/checkpoint.json", json.dumps(meta, indent=1).encode()))
    return _stream(members)
