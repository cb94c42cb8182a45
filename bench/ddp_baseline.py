"""The peers of ``bench.trainer``: a plain DDP loop for pyspark's TorchDistributor, and single-process torch.

Both build the same network (same spec, same seed) with sparktrain's builder and read the same parquet files,
so only the way the work is distributed differs. Both build the fused Adam and keep the heap while they train
(``workers.training.torch.heap``), as sparktrain's trainer does, so that the comparison is about the exchange.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np


def load_digits_arrays(train_path: str, test_path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    import pandas as pd

    train, test = pd.read_parquet(train_path), pd.read_parquet(test_path)
    x = np.stack(train["pixels"].to_numpy()).astype(np.float32)
    xv = np.stack(test["pixels"].to_numpy()).astype(np.float32)
    return x, train["label"].to_numpy().astype(np.int64), xv, test["label"].to_numpy().astype(np.int64)


def _accuracy(model: Any, xv: Any, yv: Any) -> float:
    import torch

    model.eval()
    with torch.no_grad():
        correct = (model(xv).argmax(dim=1) == yv).sum().item()
    model.train()
    return float(correct) / len(yv)


def ddp_train(
    network: dict[str, Any], lr: float, epochs: int, batch: int, seed: int, train_path: str, test_path: str
) -> dict[str, Any]:
    """What each TorchDistributor process runs: DDP over gloo, every rank on its shard of the data."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from workers.training.torch import heap
    from workers.training.torch.network import build_network, make_loss
    from workers.training.torch.spec import parse_network

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    x, y, xv, yv = load_digits_arrays(train_path, test_path)
    spec = parse_network(network, input_shape=(64,))
    shape = (-1, *spec.input_shape)
    xs, ys = torch.from_numpy(x[rank::world]).reshape(shape), torch.from_numpy(y[rank::world])
    model = DistributedDataParallel(build_network(spec, seed=seed))
    loss_fn = make_loss(spec)
    opt = torch.optim.Adam(model.parameters(), lr=lr, fused=True)  # as sparktrain builds it (optim.py)
    steps = len(xs) // batch
    t0 = time.perf_counter()
    with heap.kept():
        for epoch in range(epochs):
            order = torch.randperm(len(xs), generator=torch.Generator().manual_seed(seed * 1000 + epoch * 10 + rank))
            for s in range(steps):
                idx = order[s * batch : (s + 1) * batch]
                opt.zero_grad()
                loss_fn(model(xs[idx]), ys[idx]).backward()
                opt.step()
    train_s = time.perf_counter() - t0
    acc = _accuracy(model.module, torch.from_numpy(xv).reshape(shape), torch.from_numpy(yv))
    dist.destroy_process_group()
    return {"accuracy": acc, "train_s": train_s, "steps": steps * epochs, "samples": steps * epochs * batch * world}


def single_process(
    network: dict[str, Any], lr: float, epochs: int, batch: int, seed: int, train_path: str, test_path: str
) -> dict[str, Any]:
    """One process, all the data, the same per-step batch as one worker."""
    import torch

    from workers.training.torch import heap
    from workers.training.torch.network import build_network, make_loss
    from workers.training.torch.spec import parse_network

    torch.set_num_threads(1)
    x, y, xv, yv = load_digits_arrays(train_path, test_path)
    spec = parse_network(network, input_shape=(64,))
    shape = (-1, *spec.input_shape)
    xs, ys = torch.from_numpy(x).reshape(shape), torch.from_numpy(y)
    model = build_network(spec, seed=seed)
    loss_fn = make_loss(spec)
    opt = torch.optim.Adam(model.parameters(), lr=lr, fused=True)  # as sparktrain builds it (optim.py)
    steps = len(xs) // batch
    t0 = time.perf_counter()
    with heap.kept():
        for epoch in range(epochs):
            order = torch.randperm(len(xs), generator=torch.Generator().manual_seed(seed * 1000 + epoch))
            for s in range(steps):
                idx = order[s * batch : (s + 1) * batch]
                opt.zero_grad()
                loss_fn(model(xs[idx]), ys[idx]).backward()
                opt.step()
    train_s = time.perf_counter() - t0
    acc = _accuracy(model, torch.from_numpy(xv).reshape(shape), torch.from_numpy(yv))
    return {"accuracy": acc, "train_s": train_s, "steps": steps * epochs, "samples": steps * epochs * batch}
