"""What each worker of the trainer counts and checks beside its steps (:mod:`.remote` runs them): the byte and
step counters, the wire and codec ratios made of them, and the bitwise replica check over parameters and buffers.

Executor-side: stdlib and torch only, with this package's :mod:`.comm` and :mod:`.modes`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from workers.training.torch.comm import Comm, ring_allreduce_bytes
from workers.training.torch.config import TrainerConfig
from workers.training.torch.modes import NonFiniteUpdate


@dataclass
class Counters:
    steps: int = 0
    samples: int = 0
    bytes_sent: int = 0
    bitmap_bytes: int = 0
    bytes_after_first_epoch: int = 0
    steps_after_first_epoch: int = 0
    dense_bytes_per_step: int = 0
    wire_bytes: int = 0
    clipped_mass: float = 0.0
    dense_steps: int = 0
    train_s: float = 0.0
    last_validation: dict[str, float] = field(default_factory=dict)


def _digest(tensors: Sequence[torch.Tensor]) -> float:
    """A 48-bit digest of the tensors' exact bytes (fits a float64): equal on every rank iff bitwise equal."""
    sha = hashlib.sha256()
    for t in tensors:
        sha.update(t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().data)  # no copy
    digest = sha.digest()
    return float(int.from_bytes(digest[:6], "big"))


def replica_checksum(model: torch.nn.Module) -> float:
    """Digest of every parameter and every buffer (batch-norm statistics and counters included)."""
    return _digest([*model.parameters(), *model.buffers()])


def diverged(comm: Comm, model: torch.nn.Module, where: str, checksum: float | None = None) -> str | None:
    """None when every rank's parameters and buffers are bitwise equal; else a message naming the first tensor
    that differs and the ranks that disagree with rank 0 (one gather; a second one only on a mismatch).
    ``checksum``: this rank's :func:`replica_checksum`, when the caller has it already."""
    sums = comm.gather_floats([replica_checksum(model) if checksum is None else checksum])
    if len({row[0] for row in sums}) == 1:
        return None
    named = [*model.named_parameters(), *model.named_buffers()]
    per_tensor = comm.gather_floats([_digest([t]) for _, t in named])
    differ = next((name for i, (name, _) in enumerate(named) if len({row[i] for row in per_tensor}) > 1), "?")
    ranks = [r for r, row in enumerate(sums) if row[0] != sums[0][0]]
    return (
        f"the workers' replicas differ {where}: tensor {differ!r} on workers {ranks} is not bitwise what worker 0 "
        "holds; the checkpoints written so far are kept. Every worker must run the same code, network, seed and "
        "library versions; if they do, please report this"
    )


def kept(cfg: TrainerConfig, epoch: int) -> str:
    """What a failed run leaves to resume from: a checkpoint is written at the end of every epoch."""
    if epoch == 0 and not cfg.resume_dir:
        return "no checkpoint was written yet (the first comes at the end of epoch 1)"
    return "the checkpoints written so far are kept"


def non_finite_message(exc: NonFiniteUpdate, epoch: int, kept: str) -> str:
    return (
        f"the update of parameter {exc.parameter!r} became {exc.kind} on worker {exc.worker} at step {exc.step} "
        f"(epoch {epoch + 1}) while the loss was finite: nothing of it can be sent, so that parameter would "
        f"freeze. {kept[0].upper() + kept[1:]}; lower the learning rate or look for extreme values in the data"
    )


def totals(c: Counters, comm: Comm, mode: str) -> dict[str, Any]:
    """This worker's byte ratios over its steps and the residual mass its clipping discarded.

    ``wire_bytes`` sums the steps' collectives and the mode's end-of-epoch exchange (parameter averaging's average
    of weights and optimizer state, every mode's buffer averaging); ``wire_bytes_total`` is everything this worker
    sent in collectives so far, the rest of the end-of-epoch work (validation, checksums, checkpoint barriers)
    included.

    ``codec_compression``: dense bytes (4 per parameter) over the codec's message bytes (gradient sharing only).
    ``wire_compression``: what a dense ring all-reduce step would put on the wire from this rank over what this
    rank's steps actually put there (every collective: lengths, padding, flags, the W - 1 hops). Both None
    where undefined (no steps; one worker has no wire)."""
    dense_wire = ring_allreduce_bytes(c.dense_bytes_per_step, 4, comm.world_size, comm.rank)
    steps = max(1, c.steps)
    return {
        "wire_bytes": c.wire_bytes,
        "wire_bytes_total": comm.wire_bytes,
        "wire_bytes_per_step": c.wire_bytes / steps,
        "dense_wire_bytes_per_step": dense_wire,
        "wire_compression": dense_wire * c.steps / c.wire_bytes if c.wire_bytes and dense_wire else None,
        "codec_compression": (
            c.dense_bytes_per_step * c.steps / c.bytes_sent if mode == "gradient_sharing" and c.bytes_sent else None
        ),
        "clipped_mass": c.clipped_mass,
        # gradient sharing: the steps whose collective was the dense all-reduce of the decoded sum
        "dense_steps": c.dense_steps if mode == "gradient_sharing" else None,
    }
