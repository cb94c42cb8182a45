"""Gradient sharing's collective, chosen per step from the message lengths: the sparse all-gather of the messages
or a dense ring all-reduce of their decoded sum, whichever puts fewer bytes on the wire (or forced by
``gradient_sharing.collective``). Both keep the replicas bitwise identical at W = 4."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tests.workers.training.torch.test_remote import _cfg
from workers.training.torch.comm import dense_is_cheaper, dense_ring_total, ring_allgather_bytes, ring_allreduce_bytes
from workers.training.torch.config import SharingConfig
from workers.training.torch.data import DataLayout, Split
from workers.training.torch.local import run_local_many

OUTPUT = {"type": "output", "units": 1, "activation": "identity", "loss": "mse"}
LINE = {"input_shape": [2], "layers": [OUTPUT]}  # 3 parameters
MLP = {"input_shape": [2], "layers": [{"type": "dense", "units": 16, "activation": "relu"}, OUTPUT]}  # 65
LAYOUT = DataLayout(
    features=("x",), array_column=True, labels=("y",), task="regression", num_classes=None, input_shape=(2,)
)
WORLD = 4


def _line(n: int, seed: int) -> Split:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (n, 2))
    y = x @ np.array([1.5, -2.0]) + 0.5 + rng.normal(0, 0.1, n)
    return Split(torch.tensor(x, dtype=torch.float32), torch.tensor(y[:, None], dtype=torch.float32))


def test_the_choice_follows_the_wire_model() -> None:
    n = 1_100_000
    bitmap = 16 + 4 * -(-n // 16)  # N/4 bytes against 4N: dense only past W = 32
    assert not dense_is_cheaper(bitmap, 4 * n, 4)
    assert not dense_is_cheaper(bitmap, 4 * n, 32)
    assert dense_is_cheaper(bitmap, 4 * n, 64)
    assert not dense_is_cheaper(2_000, 4 * n, 64)  # a sparse step stays sparse
    # three parameters: the dense ring leaves most of its 2W segments empty, so it sends fewer framed messages
    assert dense_is_cheaper(20, 12, 4) and dense_is_cheaper(16, 12, 4)
    assert not dense_is_cheaper(24, 4 * 27, 4)
    assert not dense_is_cheaper(10**9, 4 * n, 1)  # one worker has no wire
    assert dense_ring_total(12, 4) == sum(ring_allreduce_bytes(12, 4, 4, r) for r in range(4))


def test_forced_dense_and_auto_keep_bitwise_replicas(tmp_path: Path) -> None:
    def cfg(name: str, network: dict[str, object], collective: str) -> object:
        return _cfg(
            tmp_path / name,
            network=network,
            data=LAYOUT,
            epochs=2,
            num_workers=WORLD,
            sharing=SharingConfig(collective=collective),  # type: ignore[arg-type]
        )

    configs = [cfg("dense", MLP, "dense"), cfg("auto-line", LINE, "auto"), cfg("auto-mlp", MLP, "auto")]
    splits = [(_line(64 + 16 * r, r), _line(32, 50 + r)) for r in range(WORLD)]  # uneven, none empty
    dense, auto_line, auto_mlp = run_local_many(configs, splits)  # type: ignore[arg-type]
    for name, results in (("dense", dense), ("auto-line", auto_line), ("auto-mlp", auto_mlp)):
        for r in results:
            assert "error" not in r and "exception" not in r, (name, r)
        assert len({r["checksum"] for r in results}) == 1, name  # parameters and buffers, bitwise
        assert [r["steps"] for r in results] == [2 * 4] * WORLD, name
    for r in dense:
        # every step: the length exchange and the ring all-reduce of 4N bytes, nothing else
        assert r["dense_steps"] == r["steps"]
        per_step = ring_allgather_bytes(16, WORLD) + ring_allreduce_bytes(4 * 65, 4, WORLD, r["rank"])
        assert r["wire_bytes"] == r["steps"] * per_step
    # auto: three parameters are cheaper dense at W = 4 on every step, 65 are cheaper sparse on every step
    assert [r["dense_steps"] for r in auto_line] == [r["steps"] for r in auto_line]
    assert [r["dense_steps"] for r in auto_mlp] == [0] * WORLD
    for r in auto_line:
        assert r["wire_bytes"] == r["steps"] * (
            ring_allgather_bytes(16, WORLD) + ring_allreduce_bytes(12, 4, WORLD, r["rank"])
        )
