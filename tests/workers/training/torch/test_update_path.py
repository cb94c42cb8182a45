"""The gradient-sharing update path loses nothing silently: tiny updates reach the residual, a non-finite update
fails the job by name, clipping reports what it discards, and the replica check covers buffers and fails."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from tests.workers.training.torch.test_remote import MLP, _cfg, _splits
from workers.training.torch.bookkeeping import replica_checksum
from workers.training.torch.checkpoint import final_dir
from workers.training.torch.local import run_local_many
from workers.training.torch.modes import take_optimizer_step_into


def _one_parameter(values: list[float]) -> tuple[torch.nn.Parameter, torch.Tensor]:
    flat = torch.tensor(values, dtype=torch.float32)
    param = torch.nn.Parameter(flat.view(-1))
    param.data = flat  # the trainer's parameters are views of one flat buffer
    return param, flat


def add_optimizer_update(optimizer: torch.optim.Optimizer, flat: torch.Tensor, residual: torch.Tensor) -> None:
    """Add the optimizer's update to ``residual`` as gradient sharing does: its residual is kept negated, and the
    step runs into it (``take_optimizer_step_into``)."""
    residual.neg_()
    take_optimizer_step_into(optimizer, flat, residual)
    residual.neg_()


def test_an_update_below_half_an_ulp_of_its_weight_reaches_the_residual() -> None:
    param, flat = _one_parameter([1.0, 1.0, -3.0])
    optimizer = torch.optim.SGD([param], lr=1.0)
    param.grad = torch.tensor([1e-8, 5e-8, 1e-7])
    residual = torch.zeros_like(flat)
    add_optimizer_update(optimizer, flat, residual)
    # the parameters are untouched; the residual holds the gradient itself, not what survives 1 - 1e-8 in float32
    assert flat.tolist() == [1.0, 1.0, -3.0]
    assert residual.tolist() == torch.tensor([1e-8, 5e-8, 1e-7]).tolist()
    # what the old subtraction read
    assert float(torch.tensor(1.0) - (torch.tensor(1.0) - torch.tensor(1e-8))) == 0.0


@pytest.mark.parametrize(
    "kind",
    ["sgd_l2_momentum", "adam_l2", "adamw", "rmsprop", "sgd_fused", "adam_fused", "adamw_fused", "adam_decoupled"],
)
def test_the_update_is_what_the_optimizer_would_apply(kind: str) -> None:
    """Against float64 arithmetic of the same optimizer: the weight-decay terms that read theta are kept."""
    gen = torch.Generator().manual_seed(0)
    theta0 = torch.randn(64, generator=gen)
    param, flat = _one_parameter(theta0.tolist())
    reference = torch.nn.Parameter(theta0.double().clone())
    make = {
        "sgd_l2_momentum": lambda p: torch.optim.SGD([p], lr=0.1, momentum=0.9, weight_decay=0.01),
        "adam_l2": lambda p: torch.optim.Adam([p], lr=0.01, weight_decay=0.01),
        "adamw": lambda p: torch.optim.AdamW([p], lr=0.01, weight_decay=0.1),
        "rmsprop": lambda p: torch.optim.RMSprop([p], lr=0.01, weight_decay=0.01),
        # the kernels the trainer builds (optim.fused_available): one pass per parameter, the same update
        "sgd_fused": lambda p: torch.optim.SGD(
            [p], lr=0.1, momentum=0.9, weight_decay=0.01, fused=p.dtype != torch.float64
        ),
        "adam_fused": lambda p: torch.optim.Adam([p], lr=0.01, weight_decay=0.01, fused=p.dtype != torch.float64),
        "adamw_fused": lambda p: torch.optim.AdamW([p], lr=0.01, weight_decay=0.1, fused=p.dtype != torch.float64),
        # decoupled decay asked of another class (Adam's flag; NAdam and RAdam have it too): known by the group
        "adam_decoupled": lambda p: torch.optim.Adam([p], lr=0.01, weight_decay=0.1, decoupled_weight_decay=True),
    }[kind]
    optimizer, ref_optimizer = make(param), make(reference)
    update = torch.empty_like(flat)
    for _ in range(3):
        grad = torch.randn(64, generator=gen)
        param.grad, reference.grad = grad.clone(), grad.double()
        update.zero_()
        add_optimizer_update(optimizer, flat, update)
        start = reference.detach().clone()
        ref_optimizer.step()
        expected = start - reference.detach()
        assert torch.allclose(update.double(), expected, rtol=1e-5, atol=1e-9), kind
        with torch.no_grad():  # both sides apply the update, as if every worker had sent it in full
            flat.sub_(update)
            reference.copy_(start - update.double())
    assert optimizer.param_groups[0]["weight_decay"] == ref_optimizer.param_groups[0]["weight_decay"]


def test_replica_checksum_covers_buffers() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    base = replica_checksum(model)
    model[1].running_mean[2] += 1e-6
    moved = replica_checksum(model)
    assert moved != base
    model[1].num_batches_tracked += 1
    assert replica_checksum(model) not in (base, moved)


def test_non_finite_update_clipped_mass_and_diverged_replicas(tmp_path: Path) -> None:
    """Four runs in one spawn of two ranks.

    1. Adam with a learning rate warming up to 1e39: the loss stays finite (gradient sharing moves each weight by
       tau per step) while the update overflows float32 after epoch 1's checkpoint: NON_FINITE_UPDATE by name.
    2. Clipping at 1 tau every step: each worker reports the residual mass it discarded.
    3. A worker started from other weights (another seed) fails the job as REPLICAS_DIVERGED after epoch 1, naming
       a tensor, instead of a warning; no checkpoint of the diverged state is written.
    4. No clipping (``residual_clipping: false``): nothing discarded.
    """
    exploding = _cfg(tmp_path / "a", epochs=4, optimizer={"type": "adam", "learning_rate": 1e39, "warmup_steps": 300})
    sharing = dataclasses.replace(
        _cfg(tmp_path).sharing,
        threshold_algorithm={"type": "fixed", "threshold": 1e-4},  # far below Adam's steps of about 1e-2
        residual_clipping={"multiple": 1.0, "frequency": 1},
    )
    clipped = _cfg(tmp_path / "b", epochs=1, sharing=sharing)
    base = _cfg(tmp_path / "c", epochs=2, network=MLP)
    odd = dataclasses.replace(base, seed=base.seed + 1)
    unclipped = _cfg(tmp_path / "d", epochs=1, sharing=dataclasses.replace(sharing, residual_clipping=None))
    nan, clip, diverged, kept = run_local_many([exploding, clipped, [base, odd], unclipped], _splits())

    assert [r.get("error", {}).get("reason") for r in nan] == ["NON_FINITE_UPDATE"] * 2, nan
    message = nan[0]["error"]["message"]
    assert message == nan[1]["error"]["message"]
    assert "parameter '" in message and "at step" in message and "checkpoints written so far are kept" in message
    step = int(message.split("at step ")[1].split()[0])
    assert step > 400 // 16  # after epoch 1
    assert final_dir(tmp_path / "a" / "checkpoints", 1).exists()

    for r in clip:
        assert "error" not in r and "exception" not in r, r
        assert r["clipped_mass"] > 0
    assert clip[0]["clipped_mass"] != clip[1]["clipped_mass"]  # per worker, from its own residual
    assert [r["clipped_mass"] for r in kept] == [0.0, 0.0], kept  # residual_clipping: false

    assert [r.get("error", {}).get("reason") for r in diverged] == ["REPLICAS_DIVERGED"] * 2, diverged
    assert "after epoch 1" in diverged[0]["error"]["message"]
    assert "tensor '" in diverged[0]["error"]["message"]
    assert not final_dir(tmp_path / "c" / "checkpoints", 1).exists()


def test_a_small_model_exchanged_exactly_trains_as_allreduce_does(tmp_path: Path) -> None:
    """A model under ``exact_below_bytes`` all-reduces its gradients and each worker's Adam steps on their mean,
    as ``allreduce`` does: the same weights bitwise, no residual, no threshold. (Exchanging the workers' Adam
    updates instead cost the shipped LSTM 2.2 points.)"""
    from safetensors.torch import load_file

    sharing = dataclasses.replace(_cfg(tmp_path).sharing, exact_below_bytes=1 << 20)
    exact = _cfg(tmp_path / "exact", epochs=2, sharing=sharing)
    allreduce = _cfg(tmp_path / "allreduce", epochs=2, mode="allreduce")
    shared, reduced = run_local_many([exact, allreduce], _splits())
    for r in shared + reduced:
        assert "error" not in r and "exception" not in r, r
    assert shared[0]["dense_steps"] == shared[0]["steps"] > 0, "every step exchanged exactly"
    a = load_file(str(tmp_path / "exact" / "model" / "weights.safetensors"))
    b = load_file(str(tmp_path / "allreduce" / "model" / "weights.safetensors"))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), {k: float((a[k] - b[k]).abs().max()) for k in a}
