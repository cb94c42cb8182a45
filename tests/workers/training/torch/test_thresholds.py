import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.codecs.threshold import encode_threshold
from workers.training.torch.residuals import ResidualClipping
from workers.training.torch.thresholds import (
    DEFAULT_DECAY,
    TAU_FLOOR,
    AdaptiveThreshold,
    FixedThreshold,
    TargetSparsityThreshold,
    ThresholdAlgorithm,
    make_threshold_algorithm,
)

# First calls into torch/numpy can exceed hypothesis's 200 ms deadline on a loaded CI machine.
NO_DEADLINE = settings(deadline=None)

N = 100_000


def test_start_at_replaces_the_first_threshold_before_the_first_step_only() -> None:
    algo = AdaptiveThreshold(initial=1e-3)
    algo.start_at(4e-3)
    assert algo.next_threshold() == 4e-3
    assert algo.spec()["initial_threshold"] == 1e-3  # the configuration is unchanged
    with pytest.raises(RuntimeError, match="already started"):
        algo.start_at(1e-2)
    with pytest.raises(ValueError, match="first threshold"):
        AdaptiveThreshold().start_at(0.0)


def test_default_decay_doubles_in_twenty_steps() -> None:
    assert math.isclose(DEFAULT_DECAY, 0.965936, abs_tol=1e-6)
    assert math.isclose(DEFAULT_DECAY**20, 0.5)


class TestAdaptive:
    def test_defaults(self) -> None:
        algo = AdaptiveThreshold()
        assert (algo.initial, algo.min_sparsity, algo.max_sparsity, algo.decay) == (1e-2, 1e-4, 1e-2, DEFAULT_DECAY)

    def test_first_call_returns_initial(self) -> None:
        algo = AdaptiveThreshold(initial=3e-3)
        assert algo.threshold is None
        assert algo.next_threshold() == 3e-3
        assert algo.threshold == 3e-3

    @pytest.mark.parametrize(
        ("count", "factor"),
        [
            (0, DEFAULT_DECAY),  # empty message: too sparse
            (9, DEFAULT_DECAY),  # 9e-5 < 1e-4
            (10, 1.0),  # exactly min
            (500, 1.0),
            (1000, 1.0),  # exactly max
            (1001, 1 / DEFAULT_DECAY),
            (N // 16, 1 / DEFAULT_DECAY),  # a bitmap step counts its true count/N
            (N, 1 / DEFAULT_DECAY),
        ],
    )
    def test_rule(self, count: int, factor: float) -> None:
        algo = AdaptiveThreshold(initial=1e-2)
        tau = algo.next_threshold()
        algo.observe(count, N)
        assert algo.last_sparsity == count / N
        assert algo.next_threshold() == pytest.approx(tau * factor, rel=1e-12)
        assert algo.last_sparsity is None

    def test_without_observation_tau_stays(self) -> None:
        algo = AdaptiveThreshold()
        tau = algo.next_threshold()
        algo.observe(0, N)
        lowered = algo.next_threshold()
        assert lowered < tau
        assert algo.next_threshold() == lowered  # the observation was used once

    def test_twenty_dense_steps_double_tau(self) -> None:
        algo = AdaptiveThreshold(initial=1e-2)
        algo.next_threshold()
        for _ in range(20):
            algo.observe(N // 16, N)
            tau = algo.next_threshold()
        assert tau == pytest.approx(2e-2)

    def test_tau_never_underflows(self) -> None:
        algo = AdaptiveThreshold(initial=1e-2, decay=0.5)
        for _ in range(300):
            tau = algo.next_threshold()
            algo.observe(0, N)
        assert tau == TAU_FLOOR
        encode_threshold(torch.zeros(10), tau)

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"decay": 0.49}, "decay"),
            ({"decay": 1.0}, "decay"),
            ({"decay": math.nan}, "decay"),
            ({"initial": 0.0}, "initial_threshold"),
            ({"initial": -1e-3}, "initial_threshold"),
            ({"initial": math.inf}, "initial_threshold"),
            ({"initial": True}, "initial_threshold"),
            ({"min_sparsity": 0.0}, "min_sparsity"),
            ({"min_sparsity": 1e-2, "max_sparsity": 1e-3}, "must be <"),
            ({"min_sparsity": 1e-3, "max_sparsity": 1e-3}, "must be <"),
            ({"max_sparsity": 1 / 16}, "max_sparsity"),
            ({"max_sparsity": "0.01"}, "max_sparsity"),
        ],
    )
    def test_validation(self, kwargs: dict[str, object], match: str) -> None:
        with pytest.raises(ValueError, match=match):
            AdaptiveThreshold(**kwargs)  # type: ignore[arg-type]

    def test_decay_half_is_allowed(self) -> None:
        assert AdaptiveThreshold(decay=0.5).decay == 0.5


def test_fixed() -> None:
    algo = FixedThreshold(2e-3)
    for count in (0, 1, N // 16, N, 50):
        assert algo.next_threshold() == 2e-3
        algo.observe(count, N)
    assert algo.last_sparsity == 50 / N
    with pytest.raises(ValueError, match="threshold"):
        FixedThreshold(0.0)


class TestTargetSparsity:
    def test_defaults(self) -> None:
        algo = TargetSparsityThreshold()
        assert (algo.initial, algo.target, algo.decay) == (1e-3, 1e-3, DEFAULT_DECAY)

    @pytest.mark.parametrize(
        ("count", "factor"),
        [(0, DEFAULT_DECAY), (99, DEFAULT_DECAY), (100, 1.0), (101, 1 / DEFAULT_DECAY), (N, 1 / DEFAULT_DECAY)],
    )
    def test_moves_every_step_unless_on_target(self, count: int, factor: float) -> None:
        algo = TargetSparsityThreshold(initial=1e-3, target=1e-3)
        tau = algo.next_threshold()
        algo.observe(count, N)
        assert algo.next_threshold() == pytest.approx(tau * factor, rel=1e-12)

    @pytest.mark.parametrize("target", [0.0, 1 / 16, 0.5, -1e-3])
    def test_validation(self, target: float) -> None:
        with pytest.raises(ValueError, match="target_sparsity"):
            TargetSparsityThreshold(target=target)


class TestFactory:
    @pytest.mark.parametrize(
        ("spec", "cls"),
        [
            ({"type": "adaptive"}, AdaptiveThreshold),
            ({"type": "adaptive", "initial_threshold": 1e-3}, AdaptiveThreshold),
            (
                {
                    "type": "adaptive",
                    "initial_threshold": 1e-3,
                    "min_sparsity": 1e-5,
                    "max_sparsity": 1e-3,
                    "decay": 0.9,
                },
                AdaptiveThreshold,
            ),
            ({"type": "fixed", "threshold": 1e-3}, FixedThreshold),
            ({"type": "target_sparsity", "initial_threshold": 1e-4, "target_sparsity": 2e-3}, TargetSparsityThreshold),
        ],
    )
    def test_builds_and_round_trips_spec(self, spec: dict[str, object], cls: type[ThresholdAlgorithm]) -> None:
        algo = make_threshold_algorithm(spec)
        assert type(algo) is cls
        full = algo.spec()
        assert {k: full[k] for k in spec} == spec
        assert make_threshold_algorithm(json.loads(json.dumps(full))).spec() == full
        assert repr(algo).startswith(cls.__name__ + "(")

    def test_values_reach_the_algorithm(self) -> None:
        algo = make_threshold_algorithm(
            {"type": "adaptive", "initial_threshold": 5e-3, "min_sparsity": 1e-5, "max_sparsity": 1e-3, "decay": 0.9}
        )
        assert isinstance(algo, AdaptiveThreshold)
        assert (algo.initial, algo.min_sparsity, algo.max_sparsity, algo.decay) == (5e-3, 1e-5, 1e-3, 0.9)
        target = make_threshold_algorithm({"type": "target_sparsity", "target_sparsity": 2e-3})
        assert isinstance(target, TargetSparsityThreshold) and target.target == 2e-3

    @pytest.mark.parametrize(
        ("spec", "match"),
        [
            ({}, "unknown threshold algorithm type None"),
            ({"type": "topk"}, "'topk'"),
            ({"type": "adaptive", "treshold": 1e-3}, "'treshold'"),
            ({"type": "fixed", "threshold": 1e-3, "decay": 0.9}, "'decay'"),
            ({"type": "fixed"}, "needs 'threshold'"),
            ({"type": "target_sparsity", "min_sparsity": 1e-4}, "'min_sparsity'"),
            ({"type": "adaptive", "decay": 2.0}, "decay"),
        ],
    )
    def test_rejects(self, spec: dict[str, object], match: str) -> None:
        with pytest.raises(ValueError, match=match):
            make_threshold_algorithm(spec)

    def test_rejects_non_mapping(self) -> None:
        with pytest.raises(ValueError, match="mapping"):
            make_threshold_algorithm([("type", "fixed")])  # type: ignore[arg-type]


SPECS = [
    {"type": "adaptive", "initial_threshold": 1e-2},
    {"type": "fixed", "threshold": 1e-3},
    {"type": "target_sparsity", "initial_threshold": 1e-3, "target_sparsity": 1e-3},
]


@pytest.mark.parametrize("spec", SPECS)
@NO_DEADLINE
@given(counts=st.lists(st.integers(0, N), min_size=1, max_size=60), split=st.integers(0, 60))
def test_state_dict_round_trip_continues_identically(spec: dict[str, object], counts: list[int], split: int) -> None:
    split = min(split, len(counts))
    original = make_threshold_algorithm(spec)
    for count in counts[:split]:
        original.next_threshold()
        original.observe(count, N)
    state = json.loads(json.dumps(original.state_dict()))
    assert set(state) == {"type", "threshold", "last_sparsity", "steps"}
    assert state["steps"] == split
    restored = make_threshold_algorithm(spec)
    restored.load_state_dict(state)
    assert restored.state_dict() == original.state_dict()
    for count in counts[split:]:
        assert restored.next_threshold() == original.next_threshold()
        restored.observe(count, N)
        original.observe(count, N)
    assert restored.state_dict() == original.state_dict()


def test_load_state_dict_rejects() -> None:
    algo = AdaptiveThreshold()
    good = {"type": "adaptive", "threshold": 1e-2, "last_sparsity": 0.5, "steps": 3}
    algo.load_state_dict(good)
    assert (algo.threshold, algo.last_sparsity) == (1e-2, 0.5)
    cases = [
        ({**good, "type": "fixed"}, "'fixed', not 'adaptive'"),
        ({**good, "extra": 1}, "unknown keys \\['extra'\\]"),
        ({k: v for k, v in good.items() if k != "steps"}, "missing keys \\['steps'\\]"),
        ({**good, "threshold": -1.0}, "threshold"),
        ({**good, "threshold": math.nan}, "threshold"),
        ({**good, "last_sparsity": 1.5}, "last_sparsity"),
        ({**good, "steps": -1}, "steps"),
        ({**good, "steps": 1.5}, "steps"),
    ]
    for state, match in cases:
        with pytest.raises(ValueError, match=match):
            algo.load_state_dict(state)
    with pytest.raises(ValueError, match="mapping"):
        algo.load_state_dict([])  # type: ignore[arg-type]


def test_observe_validates() -> None:
    algo = AdaptiveThreshold()
    algo.observe(np.int64(3), np.int64(10))
    assert algo.last_sparsity == 0.3
    algo.observe(0, 0)
    assert algo.last_sparsity == 0.0
    for count, n in ((11, 10), (-1, 10), (1.5, 10)):
        with pytest.raises(ValueError, match="count"):
            algo.observe(count, n)  # type: ignore[arg-type]


def test_adaptive_settles_in_band_on_stationary_updates() -> None:
    """The full per-step loop: the adaptive rule finds a tau whose sparsity sits in [1e-4, 1e-2]."""
    gen = torch.Generator().manual_seed(0)
    n = 20_000
    residual = torch.zeros(n)
    algo = AdaptiveThreshold(initial=1e-4)
    clipping = ResidualClipping()
    sparsities = []
    for step in range(400):
        residual += torch.randn(n, generator=gen) * 1e-2
        tau = algo.next_threshold()
        encoded = encode_threshold(residual, tau)
        algo.observe(encoded.count, encoded.n)
        clipping.apply(residual, tau, step)
        sparsities.append(encoded.sparsity)
    assert all(1e-4 <= s <= 1e-2 for s in sparsities[-50:])
