"""Checkpoints that all ranks take, and resume from, together (files: :mod:`workers.training.torch.checkpoint`).

Saving: rank 0 writes the meta and the weights into the run's partial directory, every rank its own optimizer
and mode state, and rank 0 publishes the directory (and copies it to the store) once all are done; after each
step the ranks agree (:func:`agree`) on whether a write failed anywhere. A full or unwritable store fails the
checkpoint on every rank with the same :class:`~workers.storage.StorageError` (the partial directory removed), so
the training ends with that reason on every rank, not with the other ranks' broken connections. Resuming: every
rank loads the weights and, when the checkpoint was written by as many ranks, its own optimizer, scheduler and
mode state.

Executor-side: stdlib, torch, safetensors and this package's executor modules only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from workers import storage
from workers.storage import StorageError
from workers.training.torch import checkpoint as ckpt
from workers.training.torch.comm import Comm
from workers.training.torch.config import TrainerConfig
from workers.training.torch.modes import Strategy
from workers.training.torch.report import Reporter


def save_checkpoint(
    cfg: TrainerConfig,
    rank: int,
    epoch: int,
    global_step: int,
    comm: Comm,
    model: torch.nn.Module,
    optimizer: Any,
    scheduler: Any,
    strategy: Strategy,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Every rank writes its state into ``epoch-<n>.partial-<run>``; rank 0 renames it when all are done.
    ``extra`` goes into ``meta.json`` too (the early-stopping counters). A storage failure on any rank raises the
    same :class:`StorageError` on every rank, and nothing of the checkpoint is left under its name."""
    partial = ckpt.partial_dir(cfg.checkpoint_dir, epoch, cfg.run_id)
    target = ckpt.final_dir(cfg.checkpoint_dir, epoch)

    def weights() -> None:
        ckpt.write_meta(
            partial,
            {
                "epoch": epoch,
                "global_step": global_step,
                "world_size": comm.world_size,
                "mode": cfg.mode,
                "network": cfg.network,
                "optimizer": cfg.optimizer,
                "seed": cfg.seed,
                "job_id": cfg.job_id,
                "model_card": cfg.model_card,
                **(extra or {}),
            },
        )
        ckpt.save_weights(partial, model)

    def rank_state() -> None:
        opt_tensors, opt_rest = ckpt.split_optimizer_state(optimizer.state_dict())
        mode_tensors, mode_rest = strategy.state()
        ckpt.save_rank_state(
            partial,
            rank,
            {**opt_tensors, **mode_tensors},
            {"optimizer": opt_rest, "scheduler": scheduler.state_dict() if scheduler else None, **mode_rest},
        )

    def publish() -> None:
        ckpt.publish(cfg.checkpoint_dir, epoch, cfg.run_id)
        if cfg.store:
            storage.publish_dir(target, published(cfg, f"checkpoints/epoch-{epoch}"))

    for step, everyone in ((weights, False), (rank_state, True), (publish, False)):
        failure = agree(comm, tried("writing checkpoint", str(target), step) if everyone or rank == 0 else None)
        if failure is not None:
            if rank == 0:
                with contextlib.suppress(OSError):
                    ckpt.discard(partial)
            raise failure
    return target


def tried(what: str, uri: str, step: Callable[[], None]) -> StorageError | None:
    """Run one write; a failure of the store (full, read-only, unreachable) is returned as a StorageError, to be
    agreed on by every rank (:func:`agree`). Any other error is raised."""
    try:
        with storage.guarded(what, uri):
            step()
    except StorageError as exc:
        return exc
    return None


def agree(comm: Comm, failure: StorageError | None) -> StorageError | None:
    """Every rank learns whether a write failed on any rank, with the first failing rank's error, so the ranks
    stop together and all report one reason. One all-gather of the lengths when nothing failed (a barrier)."""
    text = str(failure).encode() if failure is not None else b""
    sizes, _ = comm.exchange_lengths(len(text))
    if not any(sizes):
        return None
    mine = torch.frombuffer(bytearray(text), dtype=torch.uint8) if text else torch.zeros(0, dtype=torch.uint8)
    gathered = comm.all_gather_padded(mine, sizes)
    first = next(bytes(m.cpu().tolist()).decode(errors="replace") for m, n in zip(gathered, sizes, strict=True) if n)
    reason, _, detail = first.partition(": ")
    return StorageError(reason, detail)


def published(cfg: TrainerConfig, what: str) -> str:
    """Where a job's files go on the store: ``<store>/jobs/<job_id>/<what>``."""
    return storage.join(cfg.store or "", "jobs", cfg.job_id, what)


def resume(
    cfg: TrainerConfig,
    rank: int,
    comm: Comm,
    model: torch.nn.Module,
    optimizer: Any,
    scheduler: Any,
    strategy: Strategy,
    reporter: Reporter,
) -> int:
    """Load a checkpoint; returns the global step it was taken at."""
    assert cfg.resume_dir is not None
    directory = storage.fetch_dir(cfg.resume_dir)
    meta = ckpt.read_meta(directory)
    ckpt.load_weights(directory, model)
    state = ckpt.load_rank_state(directory, rank) if meta["world_size"] == comm.world_size else None
    if state is None:
        if rank == 0:
            reporter.send(
                {
                    "t": "warn",
                    "msg": f"the checkpoint was written by {meta['world_size']} workers, this run "
                    f"has {comm.world_size}: weights resumed, optimizer and residual state start fresh",
                }
            )
        return int(meta["global_step"])
    tensors, extra = state
    optimizer.load_state_dict(ckpt.join_optimizer_state(tensors, extra["optimizer"]))
    if scheduler is not None and extra.get("scheduler") is not None:
        scheduler.load_state_dict(extra["scheduler"])
    strategy.load_state(tensors, extra)
    return int(meta["global_step"])
