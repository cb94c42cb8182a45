"""The shipped datasets as in-memory per-rank splits, for runs of the executor-side trainer without Spark
(``workers.training.torch.local``): the GPU check (scripts/gpu_check.py) and ``bench.sharing_accuracy``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from workers.training.torch.config import DataLayout
from workers.training.torch.data import Split

REPO = Path(__file__).resolve().parents[1]


def digits_splits(world: int, shape: tuple[int, ...]) -> list[tuple[Split, Split]]:
    import pandas as pd

    train = pd.read_parquet(REPO / "datasets/digits/train.parquet")
    test = pd.read_parquet(REPO / "datasets/digits/test.parquet")
    x = torch.from_numpy(np.stack(train["pixels"].to_numpy()).astype(np.float32)).reshape(-1, *shape)
    y = torch.from_numpy(train["label"].to_numpy().astype(np.int64))
    xv = torch.from_numpy(np.stack(test["pixels"].to_numpy()).astype(np.float32)).reshape(-1, *shape)
    yv = torch.from_numpy(test["label"].to_numpy().astype(np.int64))
    return [(Split(x[r::world], y[r::world]), Split(xv[r::world], yv[r::world])) for r in range(world)]


LSTM = {
    "input_shape": [20, 3],
    "layers": [
        {"type": "lstm", "units": 32},
        {"type": "output", "units": 3, "activation": "softmax", "loss": "cross_entropy"},
    ],
}
SEQUENCE: dict[str, Any] = {"features": ["f0", "f1", "f2"], "label": "label", "layout": "rows", "labels": "last_step",
            "task": "classification", "num_classes": 3, "alignment": "ALIGN_END"}  # fmt: skip


def _padded(path: Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One row per step -> (n, T, 3) with each sequence at the start, its last step's label, its length."""
    import pandas as pd

    steps = pd.read_parquet(path).sort_values(["sequence_id", "step"])
    groups = [g for _, g in steps.groupby("sequence_id")]
    longest = max(len(g) for g in groups)
    x = np.zeros((len(groups), longest, 3), dtype=np.float32)
    for i, g in enumerate(groups):
        x[i, : len(g)] = g[["f0", "f1", "f2"]].to_numpy(np.float32)
    y = np.array([int(g["label"].iloc[-1]) for g in groups], dtype=np.int64)
    lengths = np.array([len(g) for g in groups], dtype=np.int64)
    return torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(lengths)


def sequence_splits(world: int) -> list[tuple[Split, Split]]:
    x, y, n = _padded(REPO / "datasets/sequences/train.parquet")
    xv, yv, nv = _padded(REPO / "datasets/sequences/test.parquet")
    return [
        (
            Split(x[r::world], y[r::world], lengths=n[r::world]),
            Split(xv[r::world], yv[r::world], lengths=nv[r::world]),
        )
        for r in range(world)
    ]


def layout(network: dict[str, Any]) -> DataLayout:
    """How the trainer reads the shipped set a network is for: the sequences for a recurrent one, else the digits."""
    shape = tuple(network["input_shape"])
    if network["layers"][0]["type"] in ("lstm", "gru"):
        return DataLayout(features=tuple(SEQUENCE["features"]), array_column=False, labels=("label",),
                          task="classification", num_classes=3, input_shape=shape, sequence=SEQUENCE)  # fmt: skip
    return DataLayout(features=("pixels",), array_column=True, labels=("label",), task="classification",
                      num_classes=10, input_shape=shape)  # fmt: skip


def splits_for(network: dict[str, Any], world: int) -> list[tuple[Split, Split]]:
    """Each rank's (train, validation) of the set :func:`layout` names."""
    if network["layers"][0]["type"] in ("lstm", "gru"):
        return sequence_splits(world)
    return digits_splits(world, tuple(network["input_shape"]))
