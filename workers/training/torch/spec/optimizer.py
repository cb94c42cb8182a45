"""The optimizer and learning-rate schedule of ``training.optimizer``: specs, parsing and the check against
``network.l2``.

Choices that the JSON contract leaves open:

* ``network.l2`` is applied as torch ``weight_decay`` on weight matrices and kernels (parameters with
  two or more dimensions) only, never on biases or batch-norm scale/shift. With sgd, adam and rmsprop
  that is the classic L2 penalty ``l2/2 * ||w||^2`` in the gradient. ``adamw`` has its own decoupled
  ``weight_decay``: setting both it and ``l2`` is rejected (``check_optimizer_l2``); with adamw
  ``weight_decay: 0``, ``l2`` is used as the decoupled decay.
* Learning-rate schedules count optimizer steps (iterations), not epochs: the trainer calls
  ``scheduler.step()`` once per iteration, and a resumed run only needs the step counter. Warm-up
  runs first; the main schedule's own counter starts when warm-up ends.

No third-party imports, like the whole package: the API process imports it (see :mod:`workers.training.torch.spec`).

Adding an optimizer touches more than this file: its name in :data:`OPTIMIZERS` and its keys in ``_OPTIMIZER_KEYS``
(parsing and the JSON round trip follow), the torch class built in :mod:`workers.training.torch.optim`,
``ADAM_FAMILY`` in :mod:`workers.training.torch.config` if it scales its steps as Adam does (gradient sharing's
first threshold, and the tuner's, follow it: left out, it gets SGD's), the weight-decay terms that read the
parameters in :func:`workers.training.torch.modes.take_optimizer_step_into` (L2 folded into the gradients, decoupled
decay added after the step; an update rule that reads the parameters otherwise cannot run there), its case in
``tests/workers/training/torch/test_update_path.py`` (the update against float64), and docs/torch-trainer.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workers.errors import SpecError
from workers.training.torch.spec.reader import _is_number, _Obj, _show

OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop")
SCHEDULES = ("step", "exponential", "cosine")


@dataclass(frozen=True)
class ScheduleSpec:
    """A learning-rate schedule counted in optimizer steps; only the fields of ``type`` are meaningful.

    step: ``lr * gamma ** (t // step_size)``; exponential: ``lr * gamma ** t``;
    cosine: from ``lr`` down to ``min_lr`` over ``t_max`` steps, then stays at ``min_lr``.
    """

    type: str
    step_size: int = 1
    gamma: float = 0.1
    t_max: int = 1
    min_lr: float = 0.0


@dataclass(frozen=True)
class OptimizerSpec:
    """Only the fields of ``type`` are meaningful (see ``_OPTIMIZER_KEYS``)."""

    type: str
    learning_rate: float
    momentum: float = 0.0
    nesterov: bool = False
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    alpha: float = 0.99
    warmup_steps: int = 0
    schedule: ScheduleSpec | None = None


_OPTIMIZER_KEYS: dict[str, tuple[str, ...]] = {
    "sgd": ("learning_rate", "momentum", "nesterov"),
    "adam": ("learning_rate", "betas", "eps"),
    "adamw": ("learning_rate", "betas", "eps", "weight_decay"),
    "rmsprop": ("learning_rate", "alpha", "momentum", "eps"),
}
_SCHEDULE_KEYS: dict[str, tuple[str, ...]] = {
    "step": ("step_size", "gamma"),
    "exponential": ("gamma",),
    "cosine": ("t_max", "min_lr"),
}


def described() -> str:
    """Every optimizer and schedule with its fields, as the request's OpenAPI description lists them."""
    kinds = "; ".join(f"{{type: {k}, {', '.join(v)}}}" for k, v in _OPTIMIZER_KEYS.items())
    schedules = ", ".join(f"{{type: {k}, {', '.join(v)}}}" for k, v in _SCHEDULE_KEYS.items())
    return f"{kinds}; each also takes warmup_steps and schedule ({schedules}), counted in optimizer steps"


_ADAMW_DEFAULT_WEIGHT_DECAY = 0.01


def parse_optimizer(obj: Any) -> OptimizerSpec:
    """Parse ``training.optimizer``. Schedules and ``warmup_steps`` count optimizer steps, not epochs."""
    path = "training.optimizer"
    if not isinstance(obj, Mapping):
        raise SpecError(path, f"must be an object with a 'type', got {_show(obj)}")
    kind = obj.get("type")
    if kind not in OPTIMIZERS:
        shown = "missing" if kind is None else f"unknown optimizer {_show(kind)}"
        raise SpecError(f"{path}.type", f"{shown}; known: {', '.join(OPTIMIZERS)}")
    allowed = ("type", *_OPTIMIZER_KEYS[kind], "warmup_steps", "schedule")
    opt = _Obj(obj, path, allowed, f"the {kind} optimizer")
    learning_rate = opt.number("learning_rate", low=0.0, low_open=True)
    values: dict[str, Any] = {}
    if "momentum" in allowed:
        values["momentum"] = opt.number("momentum", 0.0, low=0.0, high=1.0, high_open=True)
    if kind == "sgd":
        values["nesterov"] = opt.flag("nesterov", False)
        if values["nesterov"] and values["momentum"] == 0:
            raise SpecError(opt.at("nesterov"), "needs momentum > 0; set momentum (e.g. 0.9) or drop nesterov")
    if "betas" in allowed:
        betas = opt.raw("betas", [0.9, 0.999])
        if (
            not isinstance(betas, list | tuple)
            or len(betas) != 2
            or not all(_is_number(b) and 0 <= b < 1 for b in betas)
        ):
            raise SpecError(opt.at("betas"), f"must be two numbers in [0, 1), got {_show(betas)}")
        values["betas"] = (float(betas[0]), float(betas[1]))
    if "eps" in allowed:
        values["eps"] = opt.number("eps", 1e-8, low=0.0, low_open=True)
    if "weight_decay" in allowed:
        values["weight_decay"] = opt.number("weight_decay", _ADAMW_DEFAULT_WEIGHT_DECAY, low=0.0)
    if "alpha" in allowed:
        values["alpha"] = opt.number("alpha", 0.99, low=0.0, high=1.0, low_open=True, high_open=True)
    schedule = None
    if opt.has("schedule"):
        schedule = _parse_schedule(opt.raw("schedule"), opt.at("schedule"), learning_rate)
    return OptimizerSpec(
        type=kind,
        learning_rate=learning_rate,
        warmup_steps=opt.integer("warmup_steps", 0, minimum=0),
        schedule=schedule,
        **values,
    )


def _parse_schedule(obj: Any, path: str, learning_rate: float) -> ScheduleSpec:
    if not isinstance(obj, Mapping):
        raise SpecError(path, f"must be an object with a 'type', got {_show(obj)}")
    kind = obj.get("type")
    if kind not in SCHEDULES:
        shown = "missing" if kind is None else f"unknown schedule {_show(kind)}"
        raise SpecError(f"{path}.type", f"{shown}; known: {', '.join(SCHEDULES)}")
    sched = _Obj(obj, path, ("type", *_SCHEDULE_KEYS[kind]), f"the {kind} schedule")
    if kind == "step":
        return ScheduleSpec(
            type=kind,
            step_size=sched.integer("step_size"),
            gamma=sched.number("gamma", 0.1, low=0.0, high=1.0, low_open=True),
        )
    if kind == "exponential":
        return ScheduleSpec(type=kind, gamma=sched.number("gamma", low=0.0, high=1.0, low_open=True))
    min_lr = sched.number("min_lr", 0.0, low=0.0)
    if min_lr > learning_rate:
        raise SpecError(sched.at("min_lr"), f"must not exceed learning_rate {learning_rate:g}, got {min_lr:g}")
    return ScheduleSpec(type=kind, t_max=sched.integer("t_max"), min_lr=min_lr)


def check_optimizer_l2(optimizer: OptimizerSpec, l2: float) -> None:
    """adamw decays weights itself (decoupled); adding ``network.l2`` on top would mean two decays."""
    if optimizer.type == "adamw" and l2 > 0 and optimizer.weight_decay > 0:
        raise SpecError(
            "training.optimizer.weight_decay",
            f"adamw already applies decoupled weight_decay {optimizer.weight_decay:g} and cannot also apply "
            f"network.l2 {l2:g}; set one of them to 0 (for a plain L2 penalty with adaptive moments "
            "use adam)",
        )
