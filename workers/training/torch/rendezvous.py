"""How a barrier task finds the others: the store the process group rendezvouses through, and the exchange the data
check shares its counts over.

A job's tasks join the TCPStore the driver opened for the stage (``TrainerConfig.rendezvous``,
:func:`workers.training.torch.driver.rendezvous`) and exchange through it: no Spark ``allGather``. A task run by
hand, without a driver store, has rank 0 open the store and hand its port round through ``all_gather``
(:class:`Rendezvous`). Executor-side: imports only the standard library and torch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from workers.training.torch.comm import StoreGather, join_store, open_store
from workers.training.torch.config import TrainerConfig


def task_rendezvous(
    cfg: TrainerConfig, rank: int, world_size: int, host: str, all_gather: Callable[[str], list[str]]
) -> tuple[Any, Callable[[str], list[str]], Callable[[int], int] | None]:
    """(the store this rank brings to the process group or None, the exchange of strings among the ranks, how rank
    0's port reaches the others or None when every rank holds the store)."""
    if cfg.rendezvous is not None:  # the driver's store: no Spark allGather at all
        store = join_store(cfg.rendezvous[0], cfg.rendezvous[1], world_size, cfg.collective_timeout_s)
        return store, StoreGather(store, rank, world_size), None
    opened = open_store(host, world_size, cfg.collective_timeout_s) if rank == 0 else None
    rendezvous = Rendezvous(all_gather, opened.port if opened is not None else None)
    return opened, rendezvous.gather, rendezvous.share_port


class Rendezvous:
    """The barrier tasks' allGathers, made as few as the job allows, when the driver opened no store for the job
    (``TrainerConfig.rendezvous``: a task run by hand); a job's tasks use the driver's store instead.

    Spark's ``BarrierTaskContext`` waits for an allGather by sleeping a whole second at a time (``runBarrier``
    polls its RPC with ``Thread.sleep(1000)``), so every allGather costs the tasks that reach it first about one
    second. Rank 0's store port therefore rides on the data check's allGather when the tasks check their rows
    (:func:`workers.data.arrow_read.check_share`), and the rendezvous (:meth:`share_port`) then needs none of its
    own: measured in ``bench.data``, one second less per job."""

    def __init__(self, all_gather: Callable[[str], list[str]], port: int | None) -> None:
        self._all_gather = all_gather
        self._port = port  # rank 0's store port; None on the other ranks
        self.rank0_port: int | None = None

    def gather(self, message: str) -> list[str]:
        """``all_gather(message)``, with rank 0's port carried along."""
        replies = [json.loads(r) for r in self._all_gather(json.dumps([self._port, message]))]
        self.rank0_port = int(replies[0][0])
        return [str(m) for _, m in replies]

    def share_port(self, port: int) -> int:
        """Rank 0's port on every rank: known already when a data check gathered, else one allGather. Every rank
        makes the same calls (the same configuration decides whether the data check gathers)."""
        if self.rank0_port is None:
            self.gather("")
        assert self.rank0_port is not None
        return self.rank0_port
