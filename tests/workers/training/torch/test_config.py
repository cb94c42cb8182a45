"""The ``training.gradient_sharing`` block as a request spells it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from workers.errors import SpecError
from workers.training.torch.config import parse_sharing, planned_threshold_multiple
from workers.training.torch.spec import parse_optimizer

ADAM = parse_optimizer({"type": "adam", "learning_rate": 0.01})


def test_threshold_algorithm_defaults_per_type() -> None:
    assert parse_sharing(None, ADAM).threshold_algorithm == {"type": "adaptive", "initial_threshold": 0.01 * 63 / 64}
    fixed = {"type": "fixed", "threshold": 1e-3}
    assert parse_sharing({"threshold_algorithm": fixed}, ADAM).threshold_algorithm == fixed
    target = parse_sharing({"threshold_algorithm": {"type": "target_sparsity", "target_sparsity": 1e-3}}, ADAM)
    assert target.threshold_algorithm["initial_threshold"] == 0.01 * 63 / 64


@pytest.mark.parametrize(
    ("optimizer", "tau0"),
    [
        ({"type": "adam", "learning_rate": 0.001}, 0.001 * 63 / 64),
        ({"type": "adamw", "learning_rate": 0.003}, 0.003 * 63 / 64),
        ({"type": "rmsprop", "learning_rate": 0.0005}, 0.0005 * 63 / 64),
        ({"type": "rmsprop", "learning_rate": 0.0005, "alpha": 0.9}, 0.0005 * 63 / 64),
        ({"type": "sgd", "learning_rate": 0.1, "momentum": 0.9}, 0.01),
    ],
)
def test_the_first_threshold_is_one_optimizer_step(optimizer: dict[str, object], tau0: float) -> None:
    """Adam-family steps are at most about the learning rate per element: just under it, since Adam's first step is
    ``lr * |g| / (|g| + eps)`` and a first threshold of exactly ``lr`` held back almost all of it; SGD's scale with
    the gradient (1e-2). RMSprop's too, whatever its alpha: its first step is about ``lr / sqrt(1 - alpha)``, but a
    first threshold there was further from ``allreduce`` in 11 of 16 runs (``bench.sharing_accuracy --set rmsprop``)."""
    sharing = parse_sharing(None, parse_optimizer(optimizer))
    assert sharing.threshold_algorithm["initial_threshold"] == pytest.approx(tau0, rel=1e-12)
    assert sharing.aggregation == "mean"
    explicit = parse_sharing({"threshold_algorithm": {"initial_threshold": 0.02}, "aggregation": "sum"}, ADAM)
    assert (explicit.threshold_algorithm["initial_threshold"], explicit.aggregation) == (0.02, "sum")


def test_residual_clipping_false_turns_it_off_and_null_says_how() -> None:
    assert parse_sharing(None, ADAM).residual_clipping == {"multiple": 5.0, "frequency": 5}
    assert parse_sharing({"residual_clipping": {"multiple": 3}}, ADAM).residual_clipping == {
        "multiple": 3,
        "frequency": 5,
    }
    assert parse_sharing({"residual_clipping": False}, ADAM).residual_clipping is None
    for given in (None, True, 5):
        with pytest.raises(SpecError, match="or false for none") as refused:
            parse_sharing({"residual_clipping": given}, ADAM)
        assert refused.value.path == "training.gradient_sharing.residual_clipping"


def test_a_threshold_algorithm_that_is_not_an_object_names_the_field() -> None:
    """``"adaptive"`` or ``5`` was a 500 (``dict()`` of it raised), and a list of pairs trained (walkthrough)."""
    for given in ("adaptive", 5, True, [["type", "fixed"], ["threshold", 0.01]]):
        with pytest.raises(SpecError, match="an object such as") as refused:
            parse_sharing({"threshold_algorithm": given}, ADAM)
        assert refused.value.path == "training.gradient_sharing.threshold_algorithm"


def test_fixed_threshold_needs_its_threshold() -> None:
    with pytest.raises(SpecError, match="needs 'threshold'"):
        parse_sharing({"threshold_algorithm": {"type": "fixed"}}, ADAM)


def test_collective_defaults_to_auto_and_names_the_field() -> None:
    assert parse_sharing(None, ADAM).collective == "auto"
    assert parse_sharing({"collective": "dense"}, ADAM).collective == "dense"
    with pytest.raises(SpecError) as caught:
        parse_sharing({"collective": "ring"}, ADAM)
    assert caught.value.path == "training.gradient_sharing.collective"


def test_requests_exchange_models_under_32_kib_exactly_unless_told_otherwise() -> None:
    assert parse_sharing(None, ADAM).exact_below_bytes == 32 * 1024
    assert parse_sharing({"exact_below_bytes": 0}, ADAM).exact_below_bytes == 0
    for bad in (-1, 1.5, True, "32k"):
        with pytest.raises(SpecError) as caught:
            parse_sharing({"exact_below_bytes": bad}, ADAM)
        assert caught.value.path == "training.gradient_sharing.exact_below_bytes"


def test_left_out_the_first_threshold_of_adam_family_follows_the_run_length() -> None:
    """The trainer multiplies the one step by the planned length's multiple (remote._train calls plan())."""
    assert parse_sharing(None, ADAM).planned_initial_threshold
    target = parse_sharing({"threshold_algorithm": {"type": "target_sparsity"}}, ADAM)
    assert target.planned_initial_threshold
    explicit = parse_sharing({"threshold_algorithm": {"initial_threshold": 0.01}}, ADAM)
    assert not explicit.planned_initial_threshold
    fixed = parse_sharing({"threshold_algorithm": {"type": "fixed", "threshold": 0.01}}, ADAM)
    assert not fixed.planned_initial_threshold
    sgd = parse_sharing(None, parse_optimizer({"type": "sgd", "learning_rate": 0.1}))
    assert not sgd.planned_initial_threshold


@pytest.mark.parametrize(("steps", "multiple"), [(1, 1.0), (88, 1.0), (374, 5.5), (660, 10.0), (10**6, 10.0)])
def test_planned_threshold_multiple(steps: int, multiple: float) -> None:
    assert planned_threshold_multiple(steps) == pytest.approx(multiple)


@pytest.mark.parametrize(
    ("sharing", "path"),
    [
        ({"threshold_algorithm": {"initial_threshold": -1}}, "threshold_algorithm.initial_threshold"),
        ({"threshold_algorithm": {"type": "adaptive", "decay": 2}}, "threshold_algorithm.decay"),
        ({"threshold_algorithm": {"type": "fixed"}}, "threshold_algorithm"),  # what is missing has no place
        ({"residual_clipping": {"multiple": 0.5}}, "residual_clipping.multiple"),
    ],
)
def test_a_bad_setting_is_located_at_the_setting(sharing: dict[str, object], path: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_sharing(sharing, ADAM)
    assert refused.value.path == f"training.gradient_sharing.{path}"


def test_a_huge_learning_rate_leaves_the_first_threshold_in_the_codecs_range() -> None:
    """Adam at a learning rate of 1e30 was accepted, then the job failed SPARK_ERROR with the executor's traceback:
    its first threshold (one step, 1e30) times the long run's multiple (10) is past the codec's 1e30 (walkthrough).
    It now trains and fails as any diverging run does (NAN_LOSS), saying so."""
    from types import SimpleNamespace

    import torch

    from workers.training.torch.modes import GradientSharing, flatten_parameters
    from workers.training.torch.thresholds import TAU_CEILING, TAU_FLOOR

    for rate, first in ((1e30, TAU_CEILING / 10), (1e-40, TAU_FLOOR), (3e-3, 3e-3 * 63 / 64)):
        sharing = parse_sharing(None, parse_optimizer({"type": "adam", "learning_rate": rate}))
        assert sharing.threshold_algorithm["initial_threshold"] == pytest.approx(first, rel=1e-12)
        model = torch.nn.Linear(3000, 4)  # above the exact exchange's 32 KiB
        flat = flatten_parameters(model)
        strategy = GradientSharing(model, flat, torch.optim.Adam(model.parameters()), SimpleNamespace(world_size=2),
                                   sharing=sharing)  # fmt: skip
        assert strategy.plan(100_000) == pytest.approx(first * 10)
    stored = parse_sharing({"threshold_algorithm": {"initial_threshold": 1e30}}, ADAM)  # a config stored before
    model = torch.nn.Linear(3000, 4)
    planned = replace(stored, planned_initial_threshold=True)
    strategy = GradientSharing(model, flatten_parameters(model), torch.optim.Adam(model.parameters()),
                               SimpleNamespace(world_size=2), sharing=planned)  # fmt: skip
    assert strategy.plan(100_000) == TAU_CEILING
