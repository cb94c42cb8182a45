"""Residual clipping (DL4J's ResidualClippingPostProcessor) and the residual statistics of encodingDebugMode."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.training.torch import residuals
from workers.training.torch.residuals import ResidualClipping, make_residual_clipping, residual_stats

# First calls into torch/numpy can exceed hypothesis's 200 ms deadline on a loaded CI machine.
NO_DEADLINE = settings(deadline=None)


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
