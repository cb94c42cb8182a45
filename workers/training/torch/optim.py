"""Optimizers and learning-rate schedules from an ``OptimizerSpec``.

L2: parameters with two or more dimensions (dense/output weights, conv kernels, lstm/gru weight
matrices) form the ``decay`` group with ``weight_decay=l2``; biases and batch-norm scale/shift form
the ``no_decay`` group with 0. For adamw the decay group instead carries its decoupled
``weight_decay`` (``check_optimizer_l2`` forbids using both).

Schedules count optimizer steps: call ``scheduler.step()`` once after every ``optimizer.step()``.
The multiplier is a pure function of the step counter, so a scheduler rebuilt from the same spec
and given ``load_state_dict`` continues with exactly the same learning rates.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR, LRScheduler

from workers.training.torch.spec import OptimizerSpec, check_optimizer_l2


def parameter_groups(module: nn.Module, *, weight_decay: float) -> list[dict[str, Any]]:
    """Two groups, in ``module.parameters()`` order within each: ``decay`` first, then ``no_decay``."""
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for param in module.parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    return [
        {"name": "decay", "params": decay, "weight_decay": weight_decay},
        {"name": "no_decay", "params": no_decay, "weight_decay": 0.0},
    ]


def fused_available(module: nn.Module) -> bool:
    """Whether torch's fused SGD/Adam/AdamW kernels take every parameter: floating point, on the CPU or CUDA.

    One pass over each parameter per step instead of one per arithmetic op: Adam's step on a 9.7M-parameter MLP
    takes 11 ms on one core of the development VM instead of 54 ms (``bench.codec``'s notes). The result differs
    from the per-op kernels' in the last bit of some elements (another order of the same float32 operations)."""
    params = [p for p in module.parameters() if p.requires_grad]
    return bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)


def build_optimizer(spec: OptimizerSpec, module: nn.Module, *, l2: float) -> torch.optim.Optimizer:
    check_optimizer_l2(spec, l2)
    lr = spec.learning_rate
    fused = fused_available(module)
    if spec.type == "sgd":
        return torch.optim.SGD(
            parameter_groups(module, weight_decay=l2),
            lr=lr,
            momentum=spec.momentum,
            nesterov=spec.nesterov,
            fused=fused,
        )
    if spec.type == "adam":
        groups = parameter_groups(module, weight_decay=l2)
        return torch.optim.Adam(groups, lr=lr, betas=spec.betas, eps=spec.eps, fused=fused)
    if spec.type == "adamw":
        decay = spec.weight_decay if spec.weight_decay > 0 else l2
        groups = parameter_groups(module, weight_decay=decay)
        return torch.optim.AdamW(groups, lr=lr, betas=spec.betas, eps=spec.eps, fused=fused)
    if spec.type == "rmsprop":
        return torch.optim.RMSprop(
            parameter_groups(module, weight_decay=l2),
            lr=lr,
            alpha=spec.alpha,
            eps=spec.eps,
            momentum=spec.momentum,
        )
    raise ValueError(f"unknown optimizer {spec.type!r}")


class LrFactor:
    """Multiplier of the base learning rate at optimizer step ``t`` (0-based).

    Warm-up: ``(t + 1) / warmup_steps`` for ``t < warmup_steps`` (no step is wasted at lr 0). The main
    schedule then sees ``s = t - warmup_steps``. Attributes are plain numbers and strings so that
    ``LambdaLR.state_dict()`` stays loadable with ``torch.load(weights_only=True)``.
    """

    def __init__(self, spec: OptimizerSpec) -> None:
        schedule = spec.schedule
        self.warmup_steps = spec.warmup_steps
        self.kind = "constant" if schedule is None else schedule.type
        self.step_size = 1 if schedule is None else schedule.step_size
        self.gamma = 1.0 if schedule is None else schedule.gamma
        self.t_max = 1 if schedule is None else schedule.t_max
        self.min_ratio = 0.0 if schedule is None else schedule.min_lr / spec.learning_rate

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        s = step - self.warmup_steps
        if self.kind == "step":
            return float(self.gamma ** (s // self.step_size))
        if self.kind == "exponential":
            return float(self.gamma**s)
        if self.kind == "cosine":
            progress = min(s, self.t_max) / self.t_max
            return self.min_ratio + (1.0 - self.min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0


def build_scheduler(spec: OptimizerSpec, optimizer: torch.optim.Optimizer) -> LRScheduler | None:
    """``None`` when the spec has neither a schedule nor warm-up (constant learning rate)."""
    if spec.schedule is None and spec.warmup_steps == 0:
        return None
    return LambdaLR(optimizer, LrFactor(spec))
