"""The executor-side trainer past two workers (gloo over loopback, no Spark): bitwise replicas in every mode with
uneven partitions and batch norm, exact resume, the sum/mean scaling of gradient sharing, and wire bytes that
follow gloo's ring algorithms."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.workers.training.torch.test_remote import _blobs, _cfg
from workers.training.torch.checkpoint import final_dir
from workers.training.torch.comm import Comm, ring_allgather_bytes, ring_allreduce_bytes
from workers.training.torch.config import SharingConfig
from workers.training.torch.local import run_local_many, run_ranks
from workers.training.torch.modes import GradientSharing, NonFiniteUpdate, flatten_parameters

BN_MLP = {
    "input_shape": [8],
    "layers": [
        {"type": "dense", "units": 16, "activation": "relu"},
        {"type": "batch_norm"},
        {"type": "dense", "units": 16, "activation": "relu"},
        {"type": "output", "units": 3, "activation": "softmax", "loss": "cross_entropy"},
    ],
}
MODES = ("gradient_sharing", "parameter_averaging", "allreduce")


def _uneven(world: int) -> list[tuple[Any, Any]]:
    """Partitions of different sizes, none empty: 96, 136, 176, ... training rows."""
    return [(_blobs(96 + 40 * r, 10 + r), _blobs(40, 100 + r)) for r in range(world)]


@pytest.mark.parametrize("world", [3, 4])
def test_every_mode_keeps_bitwise_replicas_with_batch_norm_and_uneven_partitions(tmp_path: Path, world: int) -> None:
    cfgs = [
        _cfg(tmp_path / mode, mode=mode, network=BN_MLP, epochs=2, num_workers=world, averaging_frequency=2)
        for mode in MODES
    ]
    # and each mode resumed from its own epoch-1 checkpoint (written by the run before it in the same processes)
    resumed = [
        dataclasses.replace(
            cfg,
            checkpoint_dir=str(tmp_path / f"resumed-{cfg.mode}"),
            model_dir=str(tmp_path / f"resumed-{cfg.mode}-model"),
            resume_dir=str(final_dir(cfg.checkpoint_dir, 1)),
            start_epoch=1,
        )
        for cfg in cfgs
    ]
    runs = run_local_many([*cfgs, *resumed], _uneven(world))
    for mode, results, again in zip(MODES, runs[: len(MODES)], runs[len(MODES) :], strict=True):
        assert [r["checksum"] for r in again] == [r["checksum"] for r in results], mode  # resume is exact
        for r in results:
            assert "error" not in r and "exception" not in r, (mode, r)
        # the checksum covers parameters and buffers (batch-norm running statistics and counters)
        assert len({r["checksum"] for r in results}) == 1, mode
        assert [r["steps"] for r in results] == [2 * (96 // 16)] * world, mode  # the smallest partition sets it
        assert results[0]["validation"]["accuracy"] > 0.6, mode
        # wire bytes: every rank counted its own share, and the ratio says what a dense ring would cost
        dense_wire = ring_allreduce_bytes(results[0]["dense_bytes_per_step"], 4, world, 0)
        assert results[0]["dense_wire_bytes_per_step"] == dense_wire
        if mode == "allreduce":
            # per step: the flags (2 int32) and the gradients (4N), both ring all-reduces, nothing else
            n_bytes = results[0]["dense_bytes_per_step"]
            for r in results:
                per_step = ring_allreduce_bytes(8, 4, world, r["rank"]) + ring_allreduce_bytes(
                    n_bytes, 4, world, r["rank"]
                )
                # and at each epoch's end the batch norm's running mean and variance (16 floats each)
                buffers = 2 * ring_allreduce_bytes(16 * 4, 4, world, r["rank"])
                assert r["wire_bytes"] == r["steps"] * per_step + 2 * buffers
                assert r["wire_bytes_total"] > r["wire_bytes"]  # plus the epochs' validation, checksums, barriers
            assert results[0]["wire_compression"] < 1.0  # the flags cost something on top of the dense exchange
            assert results[0]["codec_compression"] is None
        if mode == "gradient_sharing":
            # a ~600-parameter model: gloo's framing of two all-gathers weighs as much as the messages, so the
            # wire ratio is far below the codec's, yet still cheaper than the dense ring all-reduce
            assert 1 < results[0]["wire_compression"] < results[0]["codec_compression"]
            # the (W - 1)-fold fan-out and the padding make the wire dearer than the codec's message sizes
            for r in results:
                assert r["wire_bytes"] > (world - 1) * r["bytes_sent"]


def _sharing(comm: Comm, aggregation: str, **options: Any) -> GradientSharing:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[2.0, -1.0, 0.5, 3.0]]))
    flat = flatten_parameters(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    sharing = SharingConfig(threshold_algorithm={"type": "fixed", "threshold": 0.5}, aggregation=aggregation,  # type: ignore[arg-type]
                            **options)  # fmt: skip
    return GradientSharing(model, flat, optimizer, comm, sharing=sharing)


def _flags(comm: Comm) -> list[Any]:
    """Rank 1 saw a NaN loss, then rank 2 asks to stop: every rank learns it from the length exchange alone."""
    out = []
    for stop, nan in (((False, comm.rank == 1)), (comm.rank == 2, False)):
        strategy = _sharing(comm, "sum")
        strategy.model.weight.grad = torch.ones(1, 4)
        before = comm.wire_bytes
        result = strategy.flagged_step(0, stop=stop, nan_loss=nan)
        out.append([result[0], result[1], result[2] is None, comm.wire_bytes - before])
    return out


def _exact_nan(comm: Comm) -> str:
    """A small model (exchanged exactly) whose rank 1 has a NaN gradient with a finite loss: what each rank raises."""
    strategy = _sharing(comm, "mean", exact_below_bytes=16)
    grad = torch.ones(1, 4)
    if comm.rank == 1:
        grad[0, 2] = float("nan")
    strategy.model.weight.grad = grad
    try:
        strategy.step(0)
    except NonFiniteUpdate as exc:
        return f"{exc.worker} {exc.parameter} {exc.kind} {exc.step}"
    return "no error"


def _scaled_step(comm: Comm, aggregation: str, **options: Any) -> dict[str, Any]:
    """One gradient-sharing step on a 4-weight model with SGD(lr=1) and a fixed tau of 0.5: rank r's update is
    1.0 at element r (r < 3) and -0.6 at element 3, so it sends +tau at r and -tau at 3 (on a sparse step)."""
    strategy = _sharing(comm, aggregation, **options)
    grad = torch.zeros(1, 4)
    grad[0, comm.rank % 3] = 1.0
    grad[0, 3] = -0.6
    strategy.model.weight.grad = grad
    before = comm.wire_bytes
    stats = strategy.step(0)
    return {"theta": strategy.flat.tolist(), "residual": strategy.residual.tolist(), "bytes": [stats.bytes_sent],
            "wire": comm.wire_bytes - before, "collective": stats.collective, "tau": stats.tau}  # fmt: skip


def _on_three_ranks(comm: Comm) -> dict[str, Any]:
    """Everything the rank-level tests need from one spawn of three processes (each start costs seconds)."""
    return {
        "sum": _scaled_step(comm, "sum"),
        "mean": _scaled_step(comm, "mean"),
        # 16 bytes of parameters: a small model, exchanged exactly; and a forced dense step, exact too
        "exact": _scaled_step(comm, "mean", exact_below_bytes=16),
        "dense": _scaled_step(comm, "mean", collective="dense"),
        "wire": _collectives(comm, 20),
        "flags": _flags(comm),
        "exact_nan": _exact_nan(comm),
    }


def _collectives(comm: Comm, rounds: int) -> dict[str, int]:
    """The trainer's collectives with uneven messages: what Comm counted, and what the kernel says this process's
    TCP sockets sent meanwhile (``ss``; -1 where it is missing)."""
    from tests.workers.training.torch.wire import ss_available, tcp_bytes_sent

    if not ss_available():
        return {"counted": 0, "measured": -1}
    comm.barrier()
    before_ss, before = tcp_bytes_sent(), comm.wire_bytes
    for i in range(rounds):
        message = torch.arange(100 + 37 * comm.rank + i, dtype=torch.int64).to(torch.uint8)
        comm.all_gather_bytes(message)
        comm.any_flags(False, True)
        comm.sum_(torch.ones(10_000))
    counted = comm.wire_bytes - before
    measured = tcp_bytes_sent() - before_ss
    comm.barrier()
    return {"counted": counted, "measured": measured}


@pytest.fixture(scope="module")
def three_ranks() -> list[dict[str, Any]]:
    out = run_ranks(_on_three_ranks, 3)
    assert all("exception" not in o for o in out), out
    return out


@pytest.mark.parametrize("aggregation", ["sum", "mean"])
def test_gradient_sharing_sums_or_averages_the_messages(three_ranks: list[dict[str, Any]], aggregation: str) -> None:
    world = 3
    scale = 1.0 if aggregation == "sum" else 1.0 / world
    tau = 0.5
    sent = torch.tensor([1.0, 1.0, 1.0, -3.0]) * tau  # three ranks sent +tau once each at 0..2, -tau at 3
    expected = (torch.tensor([2.0, -1.0, 0.5, 3.0]) - (sent * scale).float()).tolist()
    for rank, o in enumerate(three_ranks):
        assert o[aggregation]["theta"] == pytest.approx(expected, abs=0, rel=1e-7)
        residual = [0.0, 0.0, 0.0, -0.1]
        residual[rank] = 0.5
        assert o[aggregation]["residual"] == pytest.approx(residual, rel=1e-6)


@pytest.mark.parametrize("how", ["exact", "dense"])
def test_a_dense_step_carries_every_update_exactly(three_ranks: list[dict[str, Any]], how: str) -> None:
    """A small model (``exact_below_bytes``) or a forced dense step: no threshold holds anything back. The ring
    all-reduce carries the whole residual, so the parameters move by the exact mean of the three updates
    (a sparse step would move them by multiples of tau = 0.5) and no residual is left."""
    updates = torch.tensor([[1.0, 0.0, 0.0, -0.6], [0.0, 1.0, 0.0, -0.6], [0.0, 0.0, 1.0, -0.6]])
    expected = (torch.tensor([2.0, -1.0, 0.5, 3.0]) - updates.sum(0) * (1.0 / 3)).tolist()
    for rank, o in enumerate(three_ranks):
        assert o[how]["theta"] == pytest.approx(expected, abs=1e-7), rank
        assert o[how]["residual"] == [0.0] * 4 and o[how]["collective"] == 1
        assert o[how]["bytes"] == [16], "the codec saved nothing on a dense step"
        # the flags' length exchange and the ring all-reduce of 4 float32: nothing else on the wire
        assert o[how]["wire"] == ring_allgather_bytes(16, 3) + ring_allreduce_bytes(16, 4, 3, rank)
    assert [o["exact"]["tau"] for o in three_ranks] == [0.0] * 3, "no threshold on a small model"


def test_a_non_finite_gradient_of_a_small_model_fails_every_rank_by_name(three_ranks: list[dict[str, Any]]) -> None:
    assert [o["exact_nan"] for o in three_ranks] == ["1 weight NaN 1"] * 3


def test_stop_and_nan_flags_ride_on_the_length_exchange(three_ranks: list[dict[str, Any]]) -> None:
    header = ring_allgather_bytes(16, 3)  # (length, flags) as two int64, nothing else on the wire
    for o in three_ranks:
        assert o["flags"] == [[False, True, True, header], [True, False, True, header]]


def test_counted_wire_bytes_match_the_kernels_tcp_counters(three_ranks: list[dict[str, Any]]) -> None:
    """Each rank's count against the bytes its process's TCP sockets sent (tcp_info's bytes_sent), W = 3."""
    if any(o["wire"]["measured"] < 0 for o in three_ranks):
        pytest.skip("ss with tcp_info byte counters is not available here")
    for o in three_ranks:
        # framing included, the count is what TCP carried, to a few bytes (a retransmission adds some)
        assert abs(o["wire"]["measured"] - o["wire"]["counted"]) <= 0.01 * o["wire"]["counted"], o["wire"]


def test_ring_formulas() -> None:
    assert ring_allgather_bytes(100, 1) == 0
    assert ring_allgather_bytes(100, 4, framing=False) == 300
    assert ring_allgather_bytes(100, 4) == 300 + 6 * (96 + 48)  # six half-block sends and receives, framed
    assert ring_allreduce_bytes(4_000_000, 4, 1, 0) == 0
    # large buffers: 2 (W - 1) / W of the buffer per rank, summed over the ranks exactly 2 (W - 1) buffers
    for world in (2, 3, 4, 8):
        total = sum(ring_allreduce_bytes(4_000_000, 4, world, r, framing=False) for r in range(world))
        assert total == 2 * (world - 1) * 4_000_000
    # 3 int32 at W = 4: 8 one-element segments, 3 of them real; each rank sends the real ones it owns or forwards
    sends = [ring_allreduce_bytes(12, 4, 4, r, framing=False) for r in range(4)]
    assert sum(sends) == 2 * 3 * 12
    assert max(sends) > min(sends)  # the uneven split the plain formula misses
    # 2 int32 at W = 3, as measured: ranks 0, 1, 2 send 2, 2, 3 framed segments and receive 2, 4, 4
    assert [ring_allreduce_bytes(8, 4, 3, r) for r in range(3)] == [8 + 288, 8 + 384, 16 + 480]
