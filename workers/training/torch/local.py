"""Run the executor-side trainer in N local processes, without Spark.

For tests, the single-node comparisons of ``bench.trainer`` and the GPU check (``scripts/gpu_check.sh``):
the same :func:`~workers.training.torch.remote.run_training` a barrier task runs, with the rendezvous address
passed in instead of coming from ``BarrierTaskContext``.
"""

from __future__ import annotations

import socket
import traceback
from collections.abc import Callable, Sequence
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
    cfg_dicts: list[dict[str, Any]],
    rank: int,
    world: int,
    ports: list[int],
    splits: tuple[Split, Split],
    queue: Any,
    gpu_addresses: list[str],
    comm_device: str | None,
) -> None:
    from workers.training.torch.remote import run_training

    results = []
    for cfg_dict, port in zip(cfg_dicts, ports, strict=True):
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
        results.append(result)
    queue.put((rank, results))


_PRELOAD = ["torch", "workers.training.torch.remote", "workers.training.torch.comm"]


def _spawn(target: Callable[..., None], world: int, args: Callable[[int, Any], tuple[Any, ...]],
           timeout_s: float) -> list[Any]:  # fmt: skip
    """One process per rank running ``target(*args(rank, queue))``; what each put on the queue, in rank order.

    Ranks start from a fork server that imported torch once (and never ran a torch op or touched CUDA, so
    forking it is safe): a rank starts in well under a second instead of importing torch afresh each time,
    which is most of a small test run's time. Its arguments are pickled, as with spawn."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=args(rank, queue)) for rank in range(world)]
    for p in procs:
        p.start()
    try:
        results = [queue.get(timeout=timeout_s) for _ in procs]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    return [value for _, value in sorted(results, key=lambda r: int(r[0]))]


def run_local_many(
    cfgs: Sequence[TrainerConfig] | Sequence[Sequence[TrainerConfig]],
    splits: list[tuple[Split, Split]],
    *,
    gpus: list[list[str]] | None = None,
    comm_device: str | None = None,
    timeout_s: float = 900.0,
) -> list[list[dict[str, Any]]]:
    """Train each config in turn in the same rank processes (torch is imported once); returns, per config,
    every rank's summary in rank order. An entry may also be one config per rank (rank r runs ``entry[r]``),
    which is how a test gives one worker a different setting."""
    world = len(splits)
    per_rank = [[c] * world if isinstance(c, TrainerConfig) else list(c) for c in cfgs]
    ports = [free_port() for _ in per_rank]
    by_rank = _spawn(
        _rank_main,
        world,
        lambda rank, queue: (
            [entry[rank].to_dict() for entry in per_rank],
            rank,
            world,
            ports,
            splits[rank],
            queue,
            (gpus or [[]] * world)[rank],
            comm_device,
        ),
        timeout_s,
    )
    return [[by_rank[rank][i] for rank in range(world)] for i in range(len(per_rank))]


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
    return run_local_many([cfg], splits, gpus=gpus, comm_device=comm_device, timeout_s=timeout_s)[0]


def _ranks_main(fn: Callable[..., Any], rank: int, world: int, port: int, args: tuple[Any, ...], queue: Any) -> None:
    from workers.training.torch.comm import Comm

    comm = Comm(rank=rank, world_size=world, host="127.0.0.1", port=port, device=torch.device("cpu"), timeout_s=60)
    try:
        result: Any = fn(comm, *args)
    except Exception as exc:
        result = {"exception": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    finally:
        comm.close()
    queue.put((rank, result))


def run_ranks(fn: Callable[..., Any], world: int, *args: Any, timeout_s: float = 300.0) -> list[Any]:
    """``fn(comm, *args)`` in ``world`` processes joined by a gloo :class:`~.comm.Comm` on loopback; every rank's
    return value, in rank order. ``fn`` must be importable (module level) for the spawned processes."""
    port = free_port()
    return _spawn(_ranks_main, world, lambda rank, queue: (fn, rank, world, port, args, queue), timeout_s)
