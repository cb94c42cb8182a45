import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.codecs.threshold import encode_threshold
from workers.training.torch import residuals
from workers.training.torch.residuals import ResidualClipping, make_residual_clipping, residual_stats
from workers.training.torch.thresholds import (
    DEFAULT_DECAY,
    TAU_FLOOR,
    AdaptiveThreshold,
    FixedThreshold,
    TargetSparsityThreshold,
    ThresholdAlgorithm,
    make_threshold_algorithm,
    reduce_threshold_states,
)

# First calls into torch/numpy can exceed hypothesis's 200 ms deadline on a loaded CI machine.
NO_DEADLINE = settings(deadline=None)

N = 100_000


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


def test_reduce_threshold_states() -> None:
    states = []
    for tau, count in ((1e-2, 10), (3e-2, 30), (2e-2, 0)):
        algo = FixedThreshold(tau)
        algo.next_threshold()
        algo.observe(count, 1000)
        states.append(algo.state_dict())
    fresh = FixedThreshold(1.0).state_dict()
    reduced = reduce_threshold_states([*states, fresh])
    assert reduced == {
        "type": "fixed",
        "threshold": pytest.approx(2e-2),
        "last_sparsity": pytest.approx(40 / 3000),
        "steps": 1,
    }
    adaptive = AdaptiveThreshold()
    adaptive.load_state_dict(reduced | {"type": "adaptive"})
    assert adaptive.next_threshold() == pytest.approx(2e-2 / DEFAULT_DECAY)
    assert reduce_threshold_states([fresh]) == fresh
    with pytest.raises(ValueError, match="different types"):
        reduce_threshold_states([states[0], AdaptiveThreshold().state_dict()])
    with pytest.raises(ValueError, match="no threshold states"):
        reduce_threshold_states([])


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


class TestResidualClipping:
    def test_frequency(self) -> None:
        clipping = ResidualClipping(multiple=2.0, frequency=3)
        due = [step for step in range(10) if clipping.applies_at(step)]
        assert due == [3, 6, 9]
        for step in range(10):
            residual = torch.tensor([5.0, -5.0, 1.0])
            discarded = clipping.apply(residual, 1.0, step)
            if step in due:
                assert residual.tolist() == [2.0, -2.0, 1.0] and discarded == 6.0
            else:
                assert residual.tolist() == [5.0, -5.0, 1.0] and discarded == 0.0

    def test_defaults_and_mass(self) -> None:
        clipping = ResidualClipping()
        assert (clipping.multiple, clipping.frequency) == (5.0, 5)
        gen = torch.Generator().manual_seed(1)
        residual = torch.randn(10_000, generator=gen) * 0.1
        before = residual.double().clone()
        tau = 0.01
        discarded = clipping.apply(residual, tau, 5)
        assert residual.abs().max() <= 5 * tau + 1e-9
        assert discarded == pytest.approx(float((before.abs() - 5 * tau).clamp(min=0).sum()), rel=1e-6)
        assert clipping.apply(residual, tau, 10) == 0.0

    def test_multiple_one_is_allowed(self) -> None:
        residual = torch.tensor([3.0, -0.5])
        assert ResidualClipping(multiple=1.0, frequency=1).apply(residual, 1.0, 1) == 2.0
        assert residual.tolist() == [1.0, -0.5]

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"multiple": 0.99}, "multiple"),
            ({"multiple": math.nan}, "multiple"),
            ({"frequency": 0}, "frequency"),
            ({"frequency": 2.0}, "frequency"),
            ({"frequency": True}, "frequency"),
        ],
    )
    def test_validation(self, kwargs: dict[str, object], match: str) -> None:
        with pytest.raises(ValueError, match=match):
            ResidualClipping(**kwargs)  # type: ignore[arg-type]

    def test_apply_validation(self) -> None:
        clipping = ResidualClipping()
        with pytest.raises(ValueError, match="tau"):
            clipping.apply(torch.zeros(3), 0.0, 5)
        with pytest.raises(ValueError, match="step"):
            clipping.apply(torch.zeros(3), 1.0, -5)

    def test_from_spec(self) -> None:
        clipping = make_residual_clipping({"multiple": 3, "frequency": 2})
        assert clipping.spec() == {"multiple": 3.0, "frequency": 2}
        assert make_residual_clipping({}).spec() == {"multiple": 5.0, "frequency": 5}
        with pytest.raises(ValueError, match="'every'"):
            make_residual_clipping({"every": 5})


def _reference_stats(values: np.ndarray, tau: float) -> dict[str, float]:
    magnitude = np.abs(values.astype(np.float64))
    magnitude = magnitude[~np.isnan(magnitude)]
    ordered = np.sort(magnitude)
    n = ordered.size

    def rank(q: float) -> float:
        return float(ordered[max(1, math.ceil(q * n)) - 1]) / tau

    return {
        "mean": float(magnitude.mean()) / tau,
        "p50": rank(0.5),
        "p95": rank(0.95),
        "p99": rank(0.99),
        "p99_9": rank(0.999),
        "max": float(ordered[-1]) / tau,
        "fraction_ge_tau": float((magnitude >= np.float32(tau)).mean()),
    }


@NO_DEADLINE
@given(
    n=st.integers(1, 3000),
    seed=st.integers(0, 2**32 - 1),
    ties=st.booleans(),
    tau=st.sampled_from([1e-3, 0.25, 1.0]),
)
def test_residual_stats_match_reference(n: int, seed: int, ties: bool, tau: float) -> None:
    rng = np.random.default_rng(seed)
    values = (rng.integers(-4, 5, n) * 0.25 if ties else rng.standard_normal(n)).astype(np.float32)
    expected = _reference_stats(values, tau)
    small = residual_stats(torch.from_numpy(values), tau)
    assert list(small) == list(expected)
    assert small == pytest.approx(expected, rel=1e-6)


def test_residual_stats_large_path_equals_sort_path(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    for values in (
        rng.standard_normal(54_321).astype(np.float32),
        (rng.integers(-3, 4, 20_000) * 0.5).astype(np.float32),
        np.zeros(1000, dtype=np.float32),
    ):
        sorted_path = residual_stats(torch.from_numpy(values), 0.5)
        monkeypatch.setattr(residuals, "_SORT_LIMIT", 10)
        selected_path = residual_stats(torch.from_numpy(values), 0.5)
        monkeypatch.undo()
        assert selected_path == sorted_path
        assert sorted_path == pytest.approx(_reference_stats(values, 0.5), rel=1e-6)


def test_residual_stats_edges() -> None:
    assert residual_stats(torch.zeros(0), 1.0) == dict.fromkeys(
        ("mean", "p50", "p95", "p99", "p99_9", "max", "fraction_ge_tau"), 0.0
    )
    stats = residual_stats(torch.tensor([math.nan, 2.0, -4.0]), 2.0)
    assert stats["max"] == 2.0 and stats["fraction_ge_tau"] == 1.0 and stats["mean"] == 1.5
    assert residual_stats(torch.tensor([1.0, -3.0], dtype=torch.float16), 1.0)["max"] == 3.0
    with pytest.raises(ValueError, match="tau"):
        residual_stats(torch.zeros(3), 0.0)
    with pytest.raises(ValueError, match="floating"):
        residual_stats(torch.zeros(3, dtype=torch.int64), 1.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_clipping_and_stats_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = torch.Generator().manual_seed(4)
    values = torch.randn(300_001, generator=gen)
    expected = residual_stats(values, 0.5)
    assert residual_stats(values.cuda(), 0.5) == pytest.approx(expected, rel=1e-6)
    monkeypatch.setattr(residuals, "_SORT_LIMIT", 1000)
    assert residual_stats(values.cuda(), 0.5) == pytest.approx(expected, rel=1e-6)
    cpu, gpu = values.clone(), values.cuda()
    clipping = ResidualClipping(multiple=2.0, frequency=1)
    assert clipping.apply(gpu, 0.5, 1) == pytest.approx(clipping.apply(cpu, 0.5, 1), rel=1e-9)
    assert torch.equal(cpu, gpu.cpu())
