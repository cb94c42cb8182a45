"""Checkpoints and model directories: safetensors for tensors, JSON for everything else, never pickle.

A checkpoint ``epoch-<n>/`` holds what an exact resume needs:

    meta.json                 network and optimizer specs, epoch, global step, world size, mode
    weights.safetensors       the model (identical on every rank), parameters and buffers
    rank-<r>.safetensors      rank r's optimizer tensors and, for gradient sharing, its residual
    rank-<r>.json             rank r's optimizer scalars, scheduler and threshold-algorithm state

Every rank writes into ``epoch-<n>.partial-<run>/`` (``run``: this training run's id, so two runs of one job,
say a replay next to a process that has not died yet, never mix their files), each file under a temporary name,
flushed to disk (fsync) and renamed. Rank 0 renames the directory to ``epoch-<n>`` once every rank is done,
and only then reports it to the driver, which registers it. So a directory named ``epoch-<n>`` is always
complete, and what a kill at any moment leaves behind (``*.tmp`` files, ``epoch-<n>.partial-*`` directories)
is never registered, never resumed from, and removed when that epoch is published again. A model directory
(``model/``) holds ``spec.json`` and ``weights.safetensors`` and loads with plain torch + safetensors; it is also an
MLflow model directory (``MLmodel``, ``code/sparktrain_model.py``, requirements). It is written the same way, under
a private name renamed into place, so a full or read-only disk never leaves a half-written ``model/``.

Tensor files are written with direct I/O where the filesystem takes it (:mod:`workers.training.torch.tensorfile`:
a 155 MB checkpoint in a fifth of the time a buffered write took on the benchmark VM). A full disk reaches the
caller as an ``OSError`` with its errno, also where safetensors wrote the file.

Executor-side: stdlib, torch and safetensors.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from workers.training.torch import tensorfile
from workers.training.torch.meta import META, read_meta  # noqa: F401 (read_meta: snapshots.py reads it from here)

WEIGHTS = "weights.safetensors"


def partial_dir(root: str | Path, epoch: int, run: str = "") -> Path:
    return Path(root) / (f"epoch-{epoch}.partial-{run}" if run else f"epoch-{epoch}.partial")


def final_dir(root: str | Path, epoch: int) -> Path:
    return Path(root) / f"epoch-{epoch}"


def _fsync(path: Path) -> None:
    """Flush a file's data, or a directory's entries, to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _settle(tmp: Path, path: Path) -> None:
    """Give a fully written ``tmp`` its final name: data on disk first, then the atomic rename."""
    _fsync(tmp)
    os.replace(tmp, path)


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
    _settle(tmp, path)


_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def _save_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    tmp = path.with_suffix(".tmp")
    try:
        tensorfile.save({k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}, tmp)
    except Exception as exc:  # safetensors' I/O errors are SafetensorError: "... No space left on device (os error 28)"
        found = _OS_ERROR.search(str(exc))
        if found is None or isinstance(exc, OSError):
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(tmp)) from exc
    _settle(tmp, path)


def model_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {**dict(model.named_parameters()), **dict(model.named_buffers())}


def save_weights(directory: Path, model: torch.nn.Module) -> None:
    save_weight_tensors(directory, model_tensors(model))


def save_weight_tensors(directory: Path, tensors: dict[str, torch.Tensor]) -> None:
    """``weights.safetensors`` from tensors taken before (:func:`model_tensors`, copied)."""
    directory.mkdir(parents=True, exist_ok=True)
    _save_tensors(directory / WEIGHTS, tensors)


def load_weights(directory: str | Path, model: torch.nn.Module, skip: Collection[str] = ()) -> int:
    """Copy the directory's weights into ``model``'s tensors but those named in ``skip``; returns how many."""
    tensors = load_file(str(Path(directory) / WEIGHTS))
    own = {name: t for name, t in model_tensors(model).items() if name not in skip}
    missing = sorted(set(own) - set(tensors))
    if missing:
        raise ValueError(f"checkpoint {directory} lacks {missing[:5]}: it was written for another network")
    with torch.no_grad():
        for name, target in own.items():
            source = tensors[name]
            if source.shape != target.shape:
                raise ValueError(
                    f"checkpoint {directory}: {name} has shape {tuple(source.shape)}, "
                    f"the network needs {tuple(target.shape)}"
                )
            target.copy_(source.to(target.device))
    return len(own)


def split_optimizer_state(state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """torch optimizer ``state_dict()`` -> (tensors for safetensors, JSON-able rest)."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, entries in state["state"].items():
        for name, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optimizer.{index}.{name}"] = value
            else:
                scalars.setdefault(str(index), {})[name] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def join_optimizer_state(tensors: dict[str, torch.Tensor], rest: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("optimizer."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = value
    for index, entries in rest["scalars"].items():
        state.setdefault(int(index), {}).update(entries)
    return {"state": state, "param_groups": rest["param_groups"]}


def save_rank_state(directory: Path, rank: int, tensors: dict[str, torch.Tensor], extra: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    _save_tensors(directory / f"rank-{rank}.safetensors", tensors)
    _write_json(directory / f"rank-{rank}.json", extra)


def load_rank_state(directory: str | Path, rank: int) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
    base = Path(directory)
    if not (base / f"rank-{rank}.json").exists():
        return None
    tensors = load_file(str(base / f"rank-{rank}.safetensors"))
    return tensors, json.loads((base / f"rank-{rank}.json").read_text())


def write_meta(directory: Path, meta: dict[str, Any]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    _write_json(directory / META, meta)


def publish(root: str | Path, epoch: int, run: str = "") -> Path:
    """Rename the complete ``epoch-<n>.partial-<run>`` to ``epoch-<n>`` (rank 0, after every rank wrote).

    An ``epoch-<n>`` already there (an earlier run wrote this epoch and died before it was registered) is moved
    aside first, so the name never points at a half-deleted directory; leftovers of dead runs go afterwards."""
    source, target = partial_dir(root, epoch, run), final_dir(root, epoch)
    _fsync(source)
    aside = _aside(target)
    if target.exists():
        os.replace(target, aside)
    os.replace(source, target)
    _fsync(target.parent)
    for stale in [aside, *target.parent.glob(f"{target.name}.partial*"), *target.parent.glob(f"{target.name}.old-*")]:
        shutil.rmtree(stale, ignore_errors=True)
    return target


def _aside(directory: Path) -> Path:
    return directory.with_name(f"{directory.name}.old-{uuid.uuid4().hex[:8]}")


def save_model(directory: Path, model: torch.nn.Module, spec: dict[str, Any]) -> None:
    """The registered artifact: ``spec.json`` + ``weights.safetensors``, and the MLflow files that make the
    directory an MLflow model too (:mod:`workers.inference.mlflow_format`), written under a private name and
    renamed to ``directory`` (one already there is replaced) once complete and on disk."""
    from workers.inference.mlflow_format import write_mlflow_files
    from workers.storage import replace_dir

    directory.parent.mkdir(parents=True, exist_ok=True)
    partial = directory.with_name(f"{directory.name}.partial-{uuid.uuid4().hex[:8]}")
    try:
        partial.mkdir()
        _write_json(partial / "spec.json", spec)
        _save_tensors(partial / WEIGHTS, model_tensors(model))
        write_mlflow_files(partial, "torch", spec)
        for path in sorted(partial.rglob("*")):
            _fsync(path)
        _fsync(partial)
        replace_dir(partial, directory)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
