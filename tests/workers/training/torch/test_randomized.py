"""Randomized configurations of the executor-side trainer (gloo over loopback, no Spark), each checked for what must
hold whatever the configuration: the job does not fail, the replicas end bitwise identical (parameters and buffers),
a resume from a middle epoch's checkpoint ends bitwise where the uninterrupted run did, and the byte counters add up.

Seeded and reproducible: case ``i`` of seed ``s`` is always the same configuration. ``SPARKTRAIN_RANDOM_CASES`` and
``SPARKTRAIN_RANDOM_SEED`` run more cases (or others) than the few the suite runs; a failure names its case, which
:func:`draw_case` rebuilds from (seed, index).
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.workers.training.torch.test_remote import _cfg
from workers.training.torch.checkpoint import WEIGHTS, final_dir
from workers.training.torch.comm import ring_allgather_bytes, ring_allreduce_bytes
from workers.training.torch.config import DataLayout, TrainerConfig, parse_sharing
from workers.training.torch.data import Split
from workers.training.torch.local import run_local_many
from workers.training.torch.network import build_network
from workers.training.torch.spec import parse_network, parse_optimizer
from workers.training.torch.spec.early_stopping import parse_early_stopping

MODES = ("gradient_sharing", "parameter_averaging", "allreduce")
REGRESSION = ("regression_mlp", "linear_mae")
OUTPUT = {"type": "output", "units": 3, "activation": "softmax", "loss": "cross_entropy"}
NETWORKS: dict[str, dict[str, Any]] = {
    "mlp": {"input_shape": [8], "layers": [{"type": "dense", "units": 12, "activation": "tanh"}, OUTPUT]},
    "bn_dropout_mlp": {
        "input_shape": [8],
        "layers": [
            {"type": "dense", "units": 16, "activation": "relu"},
            {"type": "batch_norm"},
            {"type": "dropout", "rate": 0.2},
            {"type": "dense", "units": 8, "activation": "relu"},
            OUTPUT,
        ],
    },
    "cnn_bn": {
        "input_shape": [1, 6, 6],
        "layers": [
            {"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": 1, "activation": "relu"},
            {"type": "batch_norm"},
            {"type": "max_pool2d", "kernel_size": 2},
            {"type": "flatten"},
            {"type": "dropout", "rate": 0.1},
            OUTPUT,
        ],
    },
    # the shipped sequences' shape (bench/splits.py: 20 steps of 3 features, variable lengths), smaller
    "lstm": {"input_shape": [20, 3], "layers": [{"type": "lstm", "units": 8}, OUTPUT]},
    "gru_dense": {
        "input_shape": [20, 3],
        "layers": [{"type": "gru", "units": 6}, {"type": "dense", "units": 6, "activation": "elu"}, OUTPUT],
    },
    "regression_mlp": {
        "input_shape": [8],
        "layers": [
            {"type": "dense", "units": 8, "activation": "gelu"},
            {"type": "output", "units": 2, "activation": "identity", "loss": "mse"},
        ],
    },
    "linear_mae": {
        "input_shape": [8],
        "layers": [{"type": "output", "units": 1, "activation": "identity", "loss": "mae"}],
    },
    "binary": {
        "input_shape": [8],
        "layers": [
            {"type": "dense", "units": 8, "activation": "sigmoid"},
            {"type": "output", "units": 1, "activation": "sigmoid", "loss": "binary_cross_entropy"},
        ],
    },
    "cnn_avg": {
        "input_shape": [36],
        "layers": [
            {"type": "reshape", "shape": [1, 6, 6]},
            {"type": "conv2d", "filters": 3, "kernel_size": 2, "stride": 2, "activation": "leaky_relu"},
            {"type": "avg_pool2d", "kernel_size": 3},
            {"type": "flatten"},
            OUTPUT,
        ],
    },
}


@dataclass(frozen=True)
class Case:
    seed: int
    index: int
    world: int
    mode: str
    network: str
    l2: float
    optimizer: dict[str, Any]
    sharing: dict[str, Any]
    averaging_frequency: int
    batch: int
    epochs: int
    resume_at: int
    rows: tuple[int, ...]
    val_rows: tuple[int, ...]
    early_stopping: dict[str, Any] | None = None
    weighted: bool = False
    """Per-row loss weights (a dataset's weight column)."""

    def __str__(self) -> str:
        return (
            f"case {self.index} of seed {self.seed}: W={self.world} {self.mode} {self.network} l2={self.l2} "
            f"optimizer={self.optimizer} sharing={self.sharing} averaging_frequency={self.averaging_frequency} "
            f"batch={self.batch} epochs={self.epochs} resume_at={self.resume_at} rows={self.rows} "
            f"val_rows={self.val_rows} early_stopping={self.early_stopping} weighted={self.weighted}"
        )


def _optimizer(rng: random.Random) -> tuple[dict[str, Any], float]:
    kind = rng.choice(["sgd", "adam", "adamw", "rmsprop"])
    l2 = rng.choice([0.0, 0.0, 1e-3])
    opt: dict[str, Any] = {"type": kind}
    if kind == "sgd":
        opt["learning_rate"] = rng.choice([0.05, 0.1])
        opt["momentum"] = rng.choice([0.0, 0.9])
        if opt["momentum"] and rng.random() < 0.5:
            opt["nesterov"] = True
    elif kind in ("adam", "adamw"):
        opt["learning_rate"] = rng.choice([3e-3, 1e-2])
        if kind == "adamw":
            opt["weight_decay"] = rng.choice([0.0, 0.01, 0.1])
            if opt["weight_decay"] > 0:
                l2 = 0.0  # adamw's decoupled decay and network.l2 are one or the other (a 422)
    else:
        opt["learning_rate"] = rng.choice([1e-3, 5e-3])
        opt["alpha"] = rng.choice([0.9, 0.99])
        opt["momentum"] = rng.choice([0.0, 0.5])
    if rng.random() < 0.4:
        opt["warmup_steps"] = rng.choice([2, 5])
    schedule = rng.choice([None, None, "step", "exponential", "cosine"])
    if schedule == "step":
        opt["schedule"] = {"type": "step", "step_size": 3, "gamma": 0.5}
    elif schedule == "exponential":
        opt["schedule"] = {"type": "exponential", "gamma": 0.95}
    elif schedule == "cosine":
        opt["schedule"] = {"type": "cosine", "t_max": 10, "min_lr": opt["learning_rate"] / 10}
    return opt, l2


def _sharing(rng: random.Random) -> dict[str, Any]:
    sharing: dict[str, Any] = {}
    algorithm = rng.choice(["default", "adaptive", "fixed", "target_sparsity"])
    if algorithm == "adaptive":
        sharing["threshold_algorithm"] = {"type": "adaptive", "initial_threshold": rng.choice([1e-4, 1e-3, 1e-2])}
    elif algorithm == "fixed":
        sharing["threshold_algorithm"] = {"type": "fixed", "threshold": rng.choice([1e-4, 1e-3, 1e-2])}
    elif algorithm == "target_sparsity":
        sharing["threshold_algorithm"] = {"type": "target_sparsity", "target_sparsity": rng.choice([1e-3, 0.05])}
    clipping = rng.choice(["default", "off", "tight"])
    if clipping == "off":
        sharing["residual_clipping"] = False
    elif clipping == "tight":
        sharing["residual_clipping"] = {"multiple": 2, "frequency": 3}
    sharing["aggregation"] = rng.choice(["sum", "mean"])
    sharing["collective"] = rng.choice(["auto", "auto", "sparse", "dense"])
    # the request's default (32 KiB) exchanges these tiny models exactly; 0 thresholds them
    sharing["exact_below_bytes"] = rng.choice([0, 0, 32 * 1024])
    sharing["index_coding"] = rng.choice(["compact", "int32"])
    sharing["bitmap_ratio"] = rng.choice([2, 16, 64])
    sharing["encoding_debug"] = rng.random() < 0.2
    return sharing


FIRST: list[tuple[int, str, str, str | None, int]] = [
    # the first cases cover every world size, mode and network, and each of gradient sharing's collectives:
    # (world size, mode, network, collective, exact_below_bytes); the rest of each case is drawn
    (1, "gradient_sharing", "lstm", "auto", 0),
    (2, "gradient_sharing", "cnn_bn", "sparse", 0),
    (3, "gradient_sharing", "bn_dropout_mlp", "auto", 0),
    (4, "gradient_sharing", "gru_dense", "auto", 0),
    (1, "parameter_averaging", "binary", None, 0),
    (2, "allreduce", "regression_mlp", None, 0),
    (3, "parameter_averaging", "cnn_avg", None, 0),
    (4, "allreduce", "mlp", None, 0),
    (3, "gradient_sharing", "linear_mae", "auto", 32 * 1024),  # exchanged exactly
    (2, "gradient_sharing", "lstm", "dense", 0),
]


def draw_case(seed: int, index: int) -> Case:
    """Case ``index`` of ``seed``: always the same configuration."""
    rng = random.Random(seed * 1_000_003 + index)
    first = FIRST[index] if index < len(FIRST) else None
    world = first[0] if first else rng.choice([1, 2, 3, 4])
    mode = first[1] if first else rng.choice([*MODES, "gradient_sharing"])
    network = first[2] if first else rng.choice(sorted(NETWORKS))
    optimizer, l2 = _optimizer(rng)
    sharing = _sharing(rng)
    if first and first[3]:
        sharing.update(collective=first[3], exact_below_bytes=first[4])
    batch = rng.choice([4, 8])
    epochs = rng.choice([2, 3])
    rows = tuple(batch * rng.randint(2, 4) + rng.randint(0, batch - 1) for _ in range(world))  # uneven, none empty
    val_rows = tuple(0 if world > 1 and rng.random() < 0.15 else rng.randint(3, 12) for _ in range(world))
    early_stopping = None
    if epochs == 3 and rng.random() < 0.3:  # patience 1 may stop after epoch 2: the resume then starts at epoch 1
        metric = rng.choice(["val_loss", "val_rmse" if network in REGRESSION else "val_accuracy"])
        early_stopping = {"metric": metric, "patience": 1, "restore_best": rng.random() < 0.7}
    return Case(
        seed=seed,
        index=index,
        world=world,
        mode=mode,
        network=network,
        l2=l2,
        optimizer=optimizer,
        sharing=sharing,
        averaging_frequency=rng.randint(1, 5),
        batch=batch,
        epochs=epochs,
        resume_at=1 if early_stopping else rng.randint(1, epochs - 1),
        rows=rows,
        val_rows=val_rows,
        early_stopping=early_stopping,
        weighted=rng.random() < 0.25,
    )


def _data(network: str, n: int, seed: int, weighted: bool = False) -> Split:
    """3 separable classes (2 for ``binary``): blobs for the MLPs and the CNN, for the recurrent networks sequences
    of 3 to 20 steps (padded after) whose mean carries the class; for regression a noisy linear function."""
    rng = np.random.default_rng(seed)
    w = torch.from_numpy(rng.uniform(0.5, 2.0, n).astype(np.float32)) if weighted else None
    if network in REGRESSION:
        x = rng.normal(0, 1, (n, 8)).astype(np.float32)
        units = NETWORKS[network]["layers"][-1]["units"]
        coef = np.random.default_rng(1).normal(0, 1, (8, units))
        y = (x @ coef + rng.normal(0, 0.1, (n, units))).astype(np.float32)
        return Split(torch.from_numpy(x), torch.from_numpy(y), w)
    y = rng.integers(0, 2 if network == "binary" else 3, n)
    if network in ("lstm", "gru_dense"):
        lengths = rng.integers(3, 21, n)
        x = np.zeros((n, 20, 3), np.float32)
        for i in range(n):
            x[i, : lengths[i]] = rng.normal(y[i] - 1.0, 1.0, (lengths[i], 3))
        return Split(torch.from_numpy(x), torch.from_numpy(y), w, lengths=torch.from_numpy(lengths.astype(np.int64)))
    shape = tuple(NETWORKS[network]["input_shape"])
    width = int(np.prod(shape))
    centers = np.random.default_rng(0).normal(0, 2, (3, width))
    x = (centers[y] + rng.normal(0, 1.0, (n, width))).astype(np.float32).reshape(n, *shape)
    return Split(torch.from_numpy(x), torch.from_numpy(y), w)


def _splits(case: Case) -> list[tuple[Split, Split]]:
    base = case.seed * 7919 + case.index * 101
    return [
        (
            _data(case.network, case.rows[r], base + r, case.weighted),
            _data(case.network, case.val_rows[r], base + 50 + r),
        )
        for r in range(case.world)
    ]


def _configs(case: Case, root: Path) -> tuple[TrainerConfig, TrainerConfig]:
    """The uninterrupted run (a checkpoint every epoch) and the run resumed from its ``resume_at``-th checkpoint."""
    network = {**NETWORKS[case.network], **({"l2": case.l2} if case.l2 else {})}
    shape = tuple(network["input_shape"])
    task = "regression" if case.network in REGRESSION else "classification"
    classes = None if task == "regression" else 2 if case.network == "binary" else 3
    layout = DataLayout(features=("x",), array_column=True, labels=("y",), task=task, num_classes=classes,
                        input_shape=shape, weight="w" if case.weighted else None)  # fmt: skip
    straight = _cfg(
        root / "straight",
        job_id=f"random-{case.index}",
        network=network,
        optimizer=case.optimizer,
        mode=case.mode,
        sharing=parse_sharing(case.sharing, parse_optimizer(case.optimizer)),
        averaging_frequency=case.averaging_frequency,
        epochs=case.epochs,
        batch_size=case.batch,
        num_workers=case.world,
        seed=case.seed + case.index,
        data=layout,
        early_stopping=parse_early_stopping(case.early_stopping, task),
    )
    resumed = dataclasses.replace(
        straight,
        checkpoint_dir=str(root / "resumed" / "checkpoints"),
        model_dir=str(root / "resumed" / "model"),
        resume_dir=str(final_dir(straight.checkpoint_dir, case.resume_at)),
        start_epoch=case.resume_at,
    )
    return straight, resumed


def _sizes(cfg: TrainerConfig) -> tuple[list[int], list[int]]:
    """Bytes of each parameter, and of each floating-point buffer (batch-norm statistics), which every mode averages
    at each epoch's end."""
    model = build_network(parse_network(cfg.network, input_shape=cfg.data.input_shape), seed=0)
    params = [p.numel() * p.element_size() for p in model.parameters()]
    return params, [b.numel() * b.element_size() for b in model.buffers() if b.is_floating_point()]


def _check_counters(case: Case, cfg: TrainerConfig, results: list[dict[str, Any]], epochs: int, first: int) -> None:
    """What each rank counted adds up: bytes by the mode's rule, wire bytes by gloo's ring model where the mode's
    collectives are fixed, nothing negative, and no wire at all for one worker."""
    world = case.world
    dense = results[0]["dense_bytes_per_step"]
    params, buffers = _sizes(cfg)
    for r in results:
        steps = r["steps"]
        assert steps == r["steps_per_epoch"] * epochs
        if steps == 0:  # a resumed run that early stopping ends before its first epoch: nothing exchanged
            assert r["bytes_sent"] == r["wire_bytes"] == 0 and r["wire_compression"] is None
            continue
        for key in ("bytes_sent", "bitmap_bytes", "bytes_after_first_epoch", "wire_bytes", "wire_bytes_total"):
            assert isinstance(r[key], int) and r[key] >= 0, key
        assert r["clipped_mass"] >= 0 and math.isfinite(r["clipped_mass"])
        assert r["bitmap_bytes"] <= r["bytes_sent"] and r["bytes_after_first_epoch"] <= r["bytes_sent"]
        assert r["wire_bytes"] <= r["wire_bytes_total"]
        assert r["wire_bytes_per_step"] == r["wire_bytes"] / steps
        assert r["dense_bytes_per_step"] == dense
        assert r["dense_wire_bytes_per_step"] == ring_allreduce_bytes(dense, 4, world, r["rank"])
        if world == 1:
            assert r["wire_bytes"] == r["wire_bytes_total"] == 0 and r["wire_compression"] is None
        else:
            assert r["wire_bytes"] > 0
            assert r["wire_compression"] == pytest.approx(r["dense_wire_bytes_per_step"] * steps / r["wire_bytes"])
        per_epoch = sum(buffers)  # every mode's epoch-end buffer average
        buffer_wire = sum(ring_allreduce_bytes(b, 4, world, r["rank"]) for b in buffers)
        if case.mode == "allreduce":
            assert r["bytes_sent"] == steps * dense + epochs * per_epoch
            flags = ring_allreduce_bytes(8, 4, world, r["rank"])
            assert r["wire_bytes"] == steps * (flags + ring_allreduce_bytes(dense, 4, world, r["rank"])) + (
                epochs * buffer_wire
            )
            assert r["codec_compression"] is None and r["dense_steps"] is None
        elif case.mode == "parameter_averaging":
            f = case.averaging_frequency
            averages = sum(1 for s in range(first, first + steps) if (s + 1) % f == 0) + epochs
            averaged = r["bytes_sent"] - epochs * per_epoch
            assert averaged % averages == 0 and (averaged // averages) % dense == 0, (averaged, averages)
            assert averaged // averages >= dense  # the weights, and the optimizer's state where it has one
            # on the wire: the flags every step; per average the weights (one buffer) and each state tensor
            states = averaged // averages // dense - 1  # per parameter (Adam: 2, SGD with momentum: 1, ...)
            flags = ring_allreduce_bytes(8, 4, world, r["rank"])
            average = ring_allreduce_bytes(dense, 4, world, r["rank"]) + states * sum(
                ring_allreduce_bytes(p, 4, world, r["rank"]) for p in params
            )
            assert r["wire_bytes"] == steps * flags + averages * average + epochs * buffer_wire
        else:
            assert 0 <= r["dense_steps"] <= steps
            assert r["bytes_sent"] >= r["dense_steps"] * dense + epochs * per_epoch
            assert r["codec_compression"] == pytest.approx(dense * steps / r["bytes_sent"])
            exact = case.sharing["collective"] == "auto" and dense <= case.sharing["exact_below_bytes"]
            if exact or case.sharing["collective"] == "dense":
                assert r["dense_steps"] == steps
            if case.sharing["collective"] == "sparse":
                assert r["dense_steps"] == 0
            if exact:
                assert r["bytes_sent"] == steps * dense + epochs * per_epoch
                lengths = ring_allgather_bytes(16, world)
                assert r["wire_bytes"] == steps * (lengths + ring_allreduce_bytes(dense, 4, world, r["rank"])) + (
                    epochs * buffer_wire
                )


def check_case(case: Case, straight_cfg: TrainerConfig, resumed_cfg: TrainerConfig,
               straight: list[dict[str, Any]], resumed: list[dict[str, Any]]) -> None:  # fmt: skip
    for results in (straight, resumed):
        for r in results:
            assert "exception" not in r and "error" not in r, r.get("error") or r.get("traceback")
        assert [r["rank"] for r in results] == list(range(case.world))
        assert all(r["replicas_identical"] for r in results)
        assert len({r["checksum"] for r in results}) == 1, "replicas differ"
        validation = results[0]["validation"]
        assert all(r["validation"] == validation for r in results)
        assert all(math.isfinite(v) for v in validation.values()), validation
        assert bool(validation) == (sum(case.val_rows) > 0), validation
    spe = min(case.rows) // case.batch
    assert [r["steps_per_epoch"] for r in straight] == [spe] * case.world
    ran = straight[0]["early_stopping"]["epochs_run"] if case.early_stopping else case.epochs
    assert [r["steps"] for r in resumed] == [spe * (ran - case.resume_at)] * case.world
    # the resumed run ends bitwise where the uninterrupted one did: the checksum, the model file, the metrics
    assert resumed[0]["checksum"] == straight[0]["checksum"], "resume is not exact"
    assert (Path(resumed_cfg.model_dir) / WEIGHTS).read_bytes() == (Path(straight_cfg.model_dir) / WEIGHTS).read_bytes()
    assert resumed[0]["validation"] == straight[0]["validation"]
    if case.early_stopping:
        same = ("best_epoch", "best_score", "epochs_run", "registered_epoch", "stop_reason", "restored_best")
        assert {k: resumed[0]["early_stopping"][k] for k in same} == {k: straight[0]["early_stopping"][k] for k in same}
    _check_counters(case, straight_cfg, straight, ran, 0)
    _check_counters(case, resumed_cfg, resumed, ran - case.resume_at, spe * case.resume_at)


def run_cases(cases: list[Case], root: Path) -> dict[str, str]:
    """Every case, one spawn of rank processes per world size (the straight runs first, then their resumes);
    returns each failing case's description and what failed."""
    failures: dict[str, str] = {}
    for world in sorted({c.world for c in cases}):
        group = [c for c in cases if c.world == world]
        cfgs = [_configs(c, root / f"case-{c.index}") for c in group]
        splits = [_splits(c) for c in group]
        # run_local_many takes one set of splits per spawn: cases of a world size share processes, not data, so
        # each case gets its own spawn when their data differ (they always do); the straight run and its resume
        # share one
        for case, (straight_cfg, resumed_cfg), data in zip(group, cfgs, splits, strict=True):
            try:
                straight, resumed = run_local_many([straight_cfg, resumed_cfg], data, timeout_s=300)
                check_case(case, straight_cfg, resumed_cfg, straight, resumed)
            except AssertionError as exc:
                failures[str(case)] = f"AssertionError: {exc}"
    return failures


SEED = int(os.environ.get("SPARKTRAIN_RANDOM_SEED", "20261208"))
CASES = int(os.environ.get("SPARKTRAIN_RANDOM_CASES", str(len(FIRST))))


def test_random_configurations_keep_replicas_identical_and_resume_exactly(tmp_path: Path) -> None:
    """``CASES`` seeded configurations (by default the ten of :data:`FIRST`: every world size from 1 to 4, every
    mode, every network, gradient sharing thresholded at W = 1 to 4, forced sparse, forced dense and exact), the rest
    drawn: optimizers, schedules, warm-up, L2 and weight decay, gradient sharing's options, uneven partitions, a
    rank with no validation rows, row weights, early stopping, and a resume from a middle epoch."""
    cases = [draw_case(SEED, i) for i in range(CASES)]
    failures = run_cases(cases, tmp_path)
    assert not failures, "\n\n".join(f"{k}\n  {v}" for k, v in failures.items())


def test_an_empty_partition_fails_every_rank_alike(tmp_path: Path) -> None:
    """What the trainer says of a rank with no training rows (or fewer than a batch): EMPTY_PARTITION on every rank,
    no exception and no hang, and the validation split of a rank may be empty."""
    case = dataclasses.replace(
        draw_case(SEED, 1), world=3, mode="gradient_sharing", rows=(20, 0, 20), val_rows=(5, 0, 5)
    )
    straight, _ = _configs(case, tmp_path)
    results = run_local_many([straight], _splits(case), timeout_s=300)[0]
    assert [r.get("error", {}).get("reason") for r in results] == ["EMPTY_PARTITION"] * 3, results
