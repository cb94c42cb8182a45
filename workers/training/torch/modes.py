"""The three ways workers combine their work each step (docs/torch-trainer.md), behind one small interface.

- :class:`GradientSharing`: the optimizer's update goes into a residual; what passes the threshold is sent as
  ±tau messages (DL4J SharedTrainingMaster, Strom 2015); every worker applies every message in rank order.
- :class:`ParameterAveraging`: local steps; parameters and optimizer state averaged every k steps.
- :class:`AllReduce`: gradients averaged every step (the DDP baseline).

Parameters live in one flat float32 buffer (each parameter is a view into it), so encoding, averaging and
checksums touch one tensor. Executor-side: torch and the codec only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from workers.codecs.threshold import HEADER_BYTES, MessageKind, decode_accumulate, encode_threshold
from workers.training.torch.comm import Comm
from workers.training.torch.config import SharingConfig
from workers.training.torch.residuals import make_residual_clipping, residual_stats
from workers.training.torch.thresholds import make_threshold_algorithm


def flatten_parameters(model: torch.nn.Module) -> torch.Tensor:
    """Move every parameter into one contiguous buffer and make the parameters views of it."""
    params = list(model.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params]).contiguous()
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat[offset : offset + n].view_as(p)
        offset += n
    return flat


@dataclass
class StepStats:
    bytes_sent: int
    """What this worker put on the wire this step (a message, or its share of a dense exchange)."""
    dense_bytes: int
    bitmap: bool = False
    tau: float | None = None
    sparsity: float | None = None
    residual_norm: float | None = None
    debug: dict[str, float] | None = None


class Strategy:
    def __init__(self, model: torch.nn.Module, flat: torch.Tensor, optimizer: Any, comm: Comm) -> None:
        self.model, self.flat, self.optimizer, self.comm = model, flat, optimizer, comm
        self.params = list(model.parameters())
        self.dense_bytes = flat.numel() * 4

    def step(self, global_step: int) -> StepStats:
        raise NotImplementedError

    def end_epoch(self) -> None:
        """Make the replicas identical where the mode lets them drift (buffers such as batch-norm statistics)."""
        with torch.no_grad():
            for buffer in self.model.buffers():
                if buffer.is_floating_point():
                    self.comm.mean_(buffer)

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return {}, {}

    def load_state(self, tensors: dict[str, torch.Tensor], extra: dict[str, Any]) -> None:
        return None


class AllReduce(Strategy):
    def step(self, global_step: int) -> StepStats:
        grads = torch.cat(
            [p.grad.reshape(-1) if p.grad is not None else torch.zeros_like(p).reshape(-1) for p in self.params]
        )
        self.comm.mean_(grads)
        offset = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.copy_(grads[offset : offset + n].view_as(p))
            offset += n
        self.optimizer.step()
        return StepStats(bytes_sent=self.dense_bytes, dense_bytes=self.dense_bytes)


class ParameterAveraging(Strategy):
    def __init__(self, *args: Any, frequency: int) -> None:
        super().__init__(*args)
        self.frequency = frequency

    def _average(self) -> int:
        self.comm.mean_(self.flat)
        sent = self.dense_bytes
        for entries in self.optimizer.state.values():
            for name, value in entries.items():
                if isinstance(value, torch.Tensor) and value.is_floating_point() and name != "step":
                    self.comm.mean_(value)
                    sent += value.numel() * value.element_size()
        return sent

    def step(self, global_step: int) -> StepStats:
        self.optimizer.step()
        sent = self._average() if (global_step + 1) % self.frequency == 0 else 0
        return StepStats(bytes_sent=sent, dense_bytes=self.dense_bytes)

    def end_epoch(self) -> None:
        self._average()
        super().end_epoch()


class GradientSharing(Strategy):
    def __init__(self, *args: Any, sharing: SharingConfig) -> None:
        super().__init__(*args)
        self.sharing = sharing
        self.algorithm = make_threshold_algorithm(sharing.threshold_algorithm)
        self.clipping = make_residual_clipping(sharing.residual_clipping)
        self.residual = torch.zeros_like(self.flat)
        self._before = torch.empty_like(self.flat)
        self._update = torch.empty_like(self.flat)
        self._delta = torch.empty_like(self.flat)
        self.scale = 1.0 if sharing.aggregation == "sum" else 1.0 / self.comm.world_size
        self.encode_s = 0.0
        self.exchange_s = 0.0

    def step(self, global_step: int) -> StepStats:
        with torch.no_grad():
            # the update the optimizer would apply, u = theta_before - theta_after; then undo it
            self._before.copy_(self.flat)
            self.optimizer.step()
            torch.sub(self._before, self.flat, out=self._update)
            self.flat.copy_(self._before)
            self.residual.add_(self._update)

            t0 = time.perf_counter()
            tau = self.algorithm.next_threshold()
            encoded = encode_threshold(
                self.residual, tau, index_coding=self.sharing.index_coding, bitmap_ratio=self.sharing.bitmap_ratio
            )
            t1 = time.perf_counter()
            messages = self.comm.all_gather_bytes(encoded.message)
            t2 = time.perf_counter()
            self._delta.zero_()
            decode_accumulate(messages, self._delta, scale=self.scale)
            self.flat.sub_(self._delta)
            self.algorithm.observe(encoded.count, encoded.n)
            self.clipping.apply(self.residual, encoded.tau, global_step)
            self.encode_s += t1 - t0 + (time.perf_counter() - t2)
            self.exchange_s += t2 - t1
            debug = residual_stats(self.residual, encoded.tau) if self.sharing.encoding_debug else None
        return StepStats(
            bytes_sent=max(encoded.nbytes, HEADER_BYTES),
            dense_bytes=self.dense_bytes,
            bitmap=encoded.kind == MessageKind.BITMAP,
            tau=encoded.tau,
            sparsity=encoded.count / encoded.n,
            residual_norm=float(self.residual.norm()),
            debug=debug,
        )

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        return {"residual": self.residual}, {"threshold": self.algorithm.state_dict()}

    def load_state(self, tensors: dict[str, torch.Tensor], extra: dict[str, Any]) -> None:
        if "residual" in tensors:
            self.residual.copy_(tensors["residual"].to(self.residual.device))
        if "threshold" in extra:
            self.algorithm.load_state_dict(extra["threshold"])


def make_strategy(
    mode: str,
    model: torch.nn.Module,
    flat: torch.Tensor,
    optimizer: Any,
    comm: Comm,
    *,
    sharing: SharingConfig,
    averaging_frequency: int,
) -> Strategy:
    if mode == "gradient_sharing":
        return GradientSharing(model, flat, optimizer, comm, sharing=sharing)
    if mode == "parameter_averaging":
        return ParameterAveraging(model, flat, optimizer, comm, frequency=averaging_frequency)
    if mode == "allreduce":
        return AllReduce(model, flat, optimizer, comm)
    raise ValueError(f"unknown mode {mode!r}")
