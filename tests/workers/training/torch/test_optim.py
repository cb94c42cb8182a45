import io
import math
from typing import Any

import pytest
import torch

from workers.training.torch.network import build_network
from workers.training.torch.optim import LrFactor, build_optimizer, build_scheduler, parameter_groups
from workers.training.torch.spec import OptimizerSpec, SpecError, parse_network, parse_optimizer

NET = parse_network(
    {
        "input_shape": [6, 3],
        "layers": [
            {"type": "lstm", "units": 4, "return_sequences": True},
            {"type": "flatten"},
            {"type": "dense", "units": 5, "activation": "relu"},
            {"type": "batch_norm"},
            {"type": "output", "units": 2, "activation": "identity", "loss": "mse"},
        ],
    }
)


def opt(**obj: Any) -> OptimizerSpec:
    return parse_optimizer({"type": "sgd", "learning_rate": 0.1} | obj)


def learning_rates(spec: OptimizerSpec, steps: int) -> list[float]:
    """lr used by optimizer step t, for t in range(steps)."""
    module = build_network(NET, seed=0)
    optimizer = build_optimizer(spec, module, l2=0.0)
    scheduler = build_scheduler(spec, optimizer)
    assert scheduler is not None
    out = []
    for _ in range(steps):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return out


# --- optimizers -----------------------------------------------------------------------------------


def test_parameter_groups_split_weights_from_biases_and_batch_norm() -> None:
    module = build_network(NET, seed=0)
    decay, no_decay = parameter_groups(module, weight_decay=0.5)
    names = {id(p): name for name, p in module.named_parameters()}
    assert [names[id(p)] for p in decay["params"]] == [
        "layers.0.rnn.weight_ih_l0",
        "layers.0.rnn.weight_hh_l0",
        "layers.2.linear.weight",
        "layers.4.linear.weight",
    ]
    assert [names[id(p)] for p in no_decay["params"]] == [
        "layers.0.rnn.bias_ih_l0",
        "layers.0.rnn.bias_hh_l0",
        "layers.2.linear.bias",
        "layers.3.weight",
        "layers.3.bias",
        "layers.4.linear.bias",
    ]
    assert (decay["name"], decay["weight_decay"], no_decay["name"], no_decay["weight_decay"]) == (
        "decay",
        0.5,
        "no_decay",
        0.0,
    )


@pytest.mark.parametrize(
    ("obj", "cls", "expected"),
    [
        ({"type": "sgd", "learning_rate": 0.1}, torch.optim.SGD, {"momentum": 0.0, "nesterov": False}),
        (
            {"type": "sgd", "learning_rate": 0.1, "momentum": 0.9, "nesterov": True},
            torch.optim.SGD,
            {"momentum": 0.9, "nesterov": True},
        ),
        ({"type": "adam", "learning_rate": 1e-3}, torch.optim.Adam, {"betas": (0.9, 0.999), "eps": 1e-8}),
        (
            {"type": "adam", "learning_rate": 1e-3, "betas": [0.5, 0.9], "eps": 1e-6},
            torch.optim.Adam,
            {"betas": (0.5, 0.9), "eps": 1e-6},
        ),
        ({"type": "adamw", "learning_rate": 1e-3, "weight_decay": 0.05}, torch.optim.AdamW, {"eps": 1e-8}),
        (
            {"type": "rmsprop", "learning_rate": 1e-2, "alpha": 0.9, "momentum": 0.5, "eps": 1e-7},
            torch.optim.RMSprop,
            {"alpha": 0.9, "momentum": 0.5, "eps": 1e-7},
        ),
    ],
)
def test_every_optimizer_type(obj: dict[str, Any], cls: type, expected: dict[str, Any]) -> None:
    module = build_network(NET, seed=0)
    optimizer = build_optimizer(parse_optimizer(obj), module, l2=0.0 if obj["type"] == "adamw" else 1e-3)
    assert type(optimizer) is cls
    decay, no_decay = optimizer.param_groups
    assert decay["lr"] == no_decay["lr"] == obj["learning_rate"]
    for key, value in expected.items():
        assert decay[key] == no_decay[key] == value
    assert decay["weight_decay"] == (0.05 if obj["type"] == "adamw" else 1e-3)
    assert no_decay["weight_decay"] == 0.0
    x, y = torch.randn(4, 6, 3), torch.randn(4, 2)
    before = [p.detach().clone() for p in module.parameters()]
    torch.nn.functional.mse_loss(module(x), y).backward()
    optimizer.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))


def test_l2_shrinks_weights_but_not_biases() -> None:
    module = build_network(NET, seed=0)
    optimizer = build_optimizer(opt(), module, l2=0.5)
    before = {name: p.detach().clone() for name, p in module.named_parameters()}
    for p in module.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for name, p in module.named_parameters():
        if p.dim() >= 2:
            torch.testing.assert_close(p, before[name] * (1 - 0.1 * 0.5))
        else:
            assert torch.equal(p, before[name]), name


def test_adamw_uses_its_own_decay_and_refuses_l2_on_top() -> None:
    module = build_network(NET, seed=0)
    adamw = parse_optimizer({"type": "adamw", "learning_rate": 1e-3})
    assert build_optimizer(adamw, module, l2=0.0).param_groups[0]["weight_decay"] == 0.01
    with pytest.raises(SpecError, match="set one of them to 0"):
        build_optimizer(adamw, module, l2=1e-4)
    no_own = parse_optimizer({"type": "adamw", "learning_rate": 1e-3, "weight_decay": 0})
    assert build_optimizer(no_own, module, l2=1e-4).param_groups[0]["weight_decay"] == 1e-4


# --- schedules ------------------------------------------------------------------------------------


def test_no_schedule_means_no_scheduler() -> None:
    module = build_network(NET, seed=0)
    assert build_scheduler(opt(), build_optimizer(opt(), module, l2=0.0)) is None


def test_step_schedule() -> None:
    lrs = learning_rates(opt(schedule={"type": "step", "step_size": 3, "gamma": 0.5}), 8)
    assert lrs == pytest.approx([0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025])


def test_exponential_schedule() -> None:
    lrs = learning_rates(opt(schedule={"type": "exponential", "gamma": 0.9}), 5)
    assert lrs == pytest.approx([0.1 * 0.9**t for t in range(5)])


def test_cosine_schedule_reaches_min_lr_and_stays() -> None:
    lrs = learning_rates(opt(schedule={"type": "cosine", "t_max": 4, "min_lr": 0.02}), 7)
    expected = [0.02 + 0.08 * (1 + math.cos(math.pi * t / 4)) / 2 for t in range(5)] + [0.02, 0.02]
    assert lrs == pytest.approx(expected)
    assert lrs[2] == pytest.approx(0.06)


def test_warmup_alone_ramps_linearly_then_holds() -> None:
    lrs = learning_rates(opt(warmup_steps=4), 7)
    assert lrs == pytest.approx([0.025, 0.05, 0.075, 0.1, 0.1, 0.1, 0.1])


def test_warmup_then_main_schedule_with_its_own_counter() -> None:
    lrs = learning_rates(opt(warmup_steps=2, schedule={"type": "step", "step_size": 2, "gamma": 0.1}), 7)
    assert lrs == pytest.approx([0.05, 0.1, 0.1, 0.1, 0.01, 0.01, 0.001])
    lrs = learning_rates(opt(warmup_steps=3, schedule={"type": "cosine", "t_max": 2}), 7)
    assert lrs == pytest.approx([0.1 / 3, 0.2 / 3, 0.1, 0.1, 0.05, 0.0, 0.0])


def test_both_param_groups_follow_the_schedule() -> None:
    spec = opt(warmup_steps=2, schedule={"type": "exponential", "gamma": 0.5})
    module = build_network(NET, seed=0)
    optimizer = build_optimizer(spec, module, l2=0.1)
    scheduler = build_scheduler(spec, optimizer)
    assert scheduler is not None
    for _ in range(4):
        optimizer.step()
        scheduler.step()
    assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([0.025, 0.025])


@pytest.mark.parametrize(
    "obj",
    [
        {"type": "sgd", "learning_rate": 0.1, "momentum": 0.9, "warmup_steps": 3,
         "schedule": {"type": "cosine", "t_max": 6, "min_lr": 0.001}},
        {"type": "adam", "learning_rate": 0.01, "schedule": {"type": "step", "step_size": 2, "gamma": 0.5}},
        {"type": "rmsprop", "learning_rate": 0.01, "momentum": 0.1, "schedule": {"type": "exponential", "gamma": 0.8}},
        {"type": "adamw", "learning_rate": 0.01, "warmup_steps": 4},
    ],
)  # fmt: skip
def test_resume_from_state_dict_continues_identically(obj: dict[str, Any]) -> None:
    spec = parse_optimizer(obj)
    torch.manual_seed(0)
    batches = [(torch.randn(4, 6, 3), torch.randn(4, 2)) for _ in range(12)]

    def train(module: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, steps: range) -> list[float]:
        lrs = []
        for t in steps:
            x, y = batches[t]
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(module(x), y).backward()
            lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        return lrs

    def fresh() -> tuple[torch.nn.Module, torch.optim.Optimizer, Any]:
        module = build_network(NET, seed=3)
        optimizer = build_optimizer(spec, module, l2=0.0)
        return module, optimizer, build_scheduler(spec, optimizer)

    module, optimizer, scheduler = fresh()
    straight = train(module, optimizer, scheduler, range(12))

    module, optimizer, scheduler = fresh()
    first = train(module, optimizer, scheduler, range(5))
    buffer = io.BytesIO()
    torch.save(
        {"model": module.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
        buffer,
    )
    buffer.seek(0)
    checkpoint = torch.load(buffer, weights_only=True)
    module2, optimizer2, scheduler2 = fresh()
    module2.load_state_dict(checkpoint["model"])
    optimizer2.load_state_dict(checkpoint["optimizer"])
    scheduler2.load_state_dict(checkpoint["scheduler"])
    assert optimizer2.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    second = train(module2, optimizer2, scheduler2, range(5, 12))
    assert first + second == straight
    train(module, optimizer, scheduler, range(5, 12))
    for (name, a), b in zip(module.state_dict().items(), module2.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_lr_factor_is_plain_data() -> None:
    factor = LrFactor(opt(warmup_steps=2, schedule={"type": "cosine", "t_max": 10, "min_lr": 0.01}))
    assert vars(factor) == {
        "warmup_steps": 2,
        "kind": "cosine",
        "step_size": 1,
        "gamma": 0.1,
        "t_max": 10,
        "min_ratio": pytest.approx(0.1),
    }
    assert factor(0) == 0.5 and factor(2) == 1.0 and factor(12) == pytest.approx(0.1)
