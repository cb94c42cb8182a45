"""The barrier tasks' allGathers: rank 0's store port rides on the data check's allGather, so a job whose tasks
check their rows makes one allGather before training, not two (Spark's barrier calls wait in whole seconds)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from workers.training.torch.remote import Rendezvous


class ThreadGather:
    """An allGather among threads: every caller blocks until all ``world`` have called, then gets every message
    in rank order (what ``BarrierTaskContext.allGather`` does among tasks). Counts the rounds."""

    def __init__(self, world: int) -> None:
        self.world, self.rounds = world, 0
        self._arrived = threading.Barrier(world, action=self._round)
        self._read = threading.Barrier(world)
        self._messages: dict[int, str] = {}
        self._done: list[str] = []

    def _round(self) -> None:
        self.rounds += 1
        self._done = [self._messages[r] for r in range(self.world)]

    def for_rank(self, rank: int) -> Any:
        def gather(message: str) -> list[str]:
            self._messages[rank] = message
            self._arrived.wait(timeout=10)
            out = list(self._done)
            self._read.wait(timeout=10)  # nobody overwrites a message before every rank has read the round
            return out

        return gather


def _ranks(world: int, check: bool) -> tuple[list[tuple[list[str] | None, int]], int]:
    gather = ThreadGather(world)
    results: list[tuple[list[str] | None, int]] = [(None, -1)] * world

    def rank_main(rank: int) -> None:
        rendezvous = Rendezvous(gather.for_rank(rank), 4321 if rank == 0 else None)
        counts = rendezvous.gather(f"counts of rank {rank}") if check else None
        results[rank] = (counts, rendezvous.share_port(4321 if rank == 0 else -1))

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    return results, gather.rounds


@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_port_rides_on_the_data_checks_allgather(world: int) -> None:
    results, rounds = _ranks(world, check=True)
    assert rounds == 1, "the rendezvous made an allGather of its own"
    expected = [f"counts of rank {r}" for r in range(world)]
    assert results == [(expected, 4321)] * world


@pytest.mark.parametrize("world", [1, 3])
def test_without_a_data_check_the_rendezvous_gathers_once(world: int) -> None:
    results, rounds = _ranks(world, check=False)
    assert rounds == 1
    assert results == [(None, 4321)] * world
