"""Rendezvous of the barrier tasks. A job's tasks join the store the driver opened and make no Spark allGather. Without
one (a task run by hand) rank 0's store port rides on the data check's allGather, so tasks that check their rows make
one allGather before training, not two (Spark's barrier calls wait in whole seconds)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from workers.training.torch.rendezvous import Rendezvous


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


RANK_MAIN = """
import json, sys
import torch
from workers.training.torch.comm import Comm, StoreGather, join_store
host, port, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
store = join_store(host, port, world, 30.0)
gather = StoreGather(store, rank, world)
rounds = [gather(f"rank {rank} round {n}") for n in range(2)]
comm = Comm(rank=rank, world_size=world, host=host, port=None, device=torch.device("cpu"), timeout_s=30.0, store=store)
total = torch.tensor([float(rank + 1)])
comm._all_reduce(total)
print(json.dumps({"rounds": rounds, "sum": total.item()}), flush=True)
comm.barrier()
comm.close()  # as the trainer does: a process group left to the interpreter's exit can abort it (std::terminate)
"""


def test_every_rank_joins_the_drivers_store_for_the_data_check_and_the_process_group() -> None:
    """A job's tasks join the store the driver opened (workers/training/torch/driver.py ``rendezvous``): two
    gathers and a gloo all-reduce over it, with no Spark and no port handed round."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from workers.training.torch.comm import open_store

    world = 3
    store = open_store("127.0.0.1", world, 30.0)
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_MAIN, "127.0.0.1", str(store.port), str(rank), str(world)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[4],
        )
        for rank in range(world)
    ]
    outs = [p.communicate(timeout=120) for p in ranks]
    for p, (_, err) in zip(ranks, outs, strict=True):
        assert p.returncode == 0, err
    found = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    expected = [[f"rank {r} round {n}" for r in range(world)] for n in range(2)]
    assert found == [{"rounds": expected, "sum": 6.0}] * world


def test_a_store_that_cannot_be_reached_says_what_to_check() -> None:
    import socket

    from workers.training.torch.comm import join_store

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(
        ConnectionError, match=r"cannot reach the driver's rendezvous store at 127.0.0.1:\d+.*spark.driver.host"
    ):
        join_store("127.0.0.1", port, 2, 1.0)


def _listening_on(port: int) -> list[str]:
    """The local addresses listening on ``port``, from the kernel's table (/proc/net/tcp and tcp6, state 0A)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                local, state = row.split()[1], row.split()[3]
                address, at = local.rsplit(":", 1)
                if state == "0A" and int(at, 16) == port:
                    found.append(address)
    return found


def test_a_jobs_store_listens_on_its_hosts_address_only() -> None:
    """torch's store server listens on every interface: with SPARK_LOCAL_IP=127.0.0.1 a job's store was reachable
    from the network for the whole job (operator walkthrough). It listens on the host's address now."""
    from workers.training.torch.comm import _listening, join_store, open_store

    store = open_store("127.0.0.1", 2, 10)
    assert _listening_on(int(store.port)) == ["0100007F"], "127.0.0.1 only, in the kernel's byte order"
    other = join_store("127.0.0.1", int(store.port), 2, 10)
    other.set("k", "v")
    assert store.get("k") == b"v"
    assert _listening("192.0.2.1", 0) is None, "not this machine's: torch's own store, as before"
    del other, store
