"""Collectives between the training workers (torch.distributed over gloo on CPU, NCCL on CUDA).

Executor-side: imports only torch. Rendezvous goes through a TCPStore that rank 0 opens on a port the OS
picks (no probe-then-bind race); the port reaches the other ranks through Spark's barrier ``allGather`` or,
without Spark, through the caller. Every collective has a timeout, so a lost peer fails the stage instead of
hanging it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist


class Comm:
    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        host: str,
        port: int | None,
        device: torch.device,
        timeout_s: float = 300.0,
        share_port: Callable[[int], int] | None = None,
    ) -> None:
        """Join the process group. Rank 0 opens the store: on ``port``, or on a free port when ``port`` is None,
        which ``share_port`` (rank 0's port in, rank 0's port out on every rank) hands to the others."""
        self.rank, self.world_size, self.device = rank, world_size, device
        timeout = timedelta(seconds=timeout_s)
        if rank == 0:
            store = dist.TCPStore(host, port or 0, world_size, is_master=True, timeout=timeout, wait_for_workers=False)
            port = store.port
            if share_port is not None:
                share_port(port)
        else:
            if share_port is not None:
                port = share_port(-1)
            if port is None:
                raise ValueError("rank > 0 needs rank 0's port")
            store = dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
        self.backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(self.backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
        self._store = store

    def _on_device(self, t: torch.Tensor) -> torch.Tensor:
        return t if t.device == self.device else t.to(self.device)

    def all_gather_bytes(self, message: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's uint8 message, in rank order. gloo's all_gather needs equal sizes: gather the lengths,
        then buffers padded to the longest, then trim."""
        length = torch.tensor([message.numel()], dtype=torch.int64, device=self.device)
        lengths = [torch.zeros_like(length) for _ in range(self.world_size)]
        dist.all_gather(lengths, length)
        sizes = [int(x.item()) for x in lengths]
        longest = max(sizes)
        padded = torch.zeros(longest, dtype=torch.uint8, device=self.device)
        padded[: message.numel()] = self._on_device(message)
        out = [torch.empty(longest, dtype=torch.uint8, device=self.device) for _ in range(self.world_size)]
        dist.all_gather(out, padded)
        return [buf[:size] for buf, size in zip(out, sizes, strict=True)]

    def any_flags(self, *flags: bool) -> list[bool]:
        """For each flag: is it set on any rank? (stop requests, a NaN loss)."""
        t = torch.tensor([int(f) for f in flags], dtype=torch.int32, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return [bool(v) for v in t.tolist()]

    def min_int(self, value: int) -> int:
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return int(t.item())

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """All-reduce (sum) in place; CPU tensors take a round trip through the device under NCCL."""
        if tensor.device == self.device:
            dist.all_reduce(tensor)
            return tensor
        on_device = tensor.to(self.device)
        dist.all_reduce(on_device)
        tensor.copy_(on_device)
        return tensor

    def mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        self.sum_(tensor)
        return tensor.div_(self.world_size)

    def gather_floats(self, values: list[float]) -> list[list[float]]:
        """Every rank's list of floats (same length everywhere), in rank order."""
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        out = [torch.zeros_like(t) for _ in range(self.world_size)]
        dist.all_gather(out, t)
        return [o.tolist() for o in out]

    def barrier(self) -> None:
        # all_reduce instead of dist.barrier(): NCCL's barrier guesses a device and warns
        self.any_flags(False)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
