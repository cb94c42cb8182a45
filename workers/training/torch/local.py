"""Run the executor-side trainer in N local processes, without Spark.

For tests, the single-node comparisons of ``bench.trainer`` and the GPU check (``scripts/gpu_check.sh``):
the same :func:`~workers.training.torch.remote.run_training` a barrier task runs, with the rendezvous address
passed in instead of coming from ``BarrierTaskContext``.
"""

from __future__ import annotations

import socket
import traceback
from typing import Any

import torch
import torch.multiprocessing as mp

from workers.training.torch.config import TrainerConfig
from workers.training.torch.data import Split


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_main(
    cfg_dict: dict[str, Any],
    rank: int,
    world: int,
    port: int,
    splits: tuple[Split, Split],
    queue: Any,
    gpu_addresses: list[str],
    comm_device: str | None,
) -> None:
    from workers.training.torch.remote import run_training

    try:
        result = run_training(
            TrainerConfig.from_dict(cfg_dict),
            rank=rank,
            world_size=world,
            host="127.0.0.1",
            port=port,
            train=splits[0],
            val=splits[1],
            gpu_addresses=gpu_addresses,
            comm_device=torch.device(comm_device) if comm_device else None,
        )
    except Exception as exc:
        result = {"rank": rank, "exception": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    queue.put(result)


def run_local(
    cfg: TrainerConfig,
    splits: list[tuple[Split, Split]],
    *,
    gpus: list[list[str]] | None = None,
    comm_device: str | None = None,
    timeout_s: float = 900.0,
) -> list[dict[str, Any]]:
    """Train with one process per (train, validation) pair; returns every rank's summary, in rank order.
    ``gpus[r]`` plays the GPU addresses Spark would give rank r."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    world = len(splits)
    procs = [
        ctx.Process(
            target=_rank_main,
            args=(cfg.to_dict(), rank, world, port, splits[rank], queue, (gpus or [[]] * world)[rank], comm_device),
        )
        for rank in range(world)
    ]
    for p in procs:
        p.start()
    try:
        results = [queue.get(timeout=timeout_s) for _ in procs]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    return sorted(results, key=lambda r: int(r["rank"]))
