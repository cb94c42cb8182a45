"""The linear-model report: normalizer folding and linearity detection (the comparison with a known truth is the
demo's: tests/datasets/test_linear.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from workers.data.normalize import Moments, Normalizer, normalizer_from
from workers.training.torch import linear
from workers.training.torch.network import Network
from workers.training.torch.spec import parse_network, spec_to_dict

FEATURES = ["a", "b", "c"]
OUTPUT = {"type": "output", "units": 1, "activation": "identity", "loss": "mse"}


def network(*layers: dict[str, Any], width: int = 3) -> dict[str, Any]:
    return spec_to_dict(parse_network({"layers": list(layers)}, input_shape=(width,)))


def card(normalizer: Normalizer | None = None, **overrides: Any) -> dict[str, Any]:
    """What driver.model_card writes for a tabular regression."""
    return {
        "input_shape": [len(FEATURES)],
        "features": FEATURES,
        "array_column": False,
        "labels": ["y"],
        "task": "regression",
        "num_classes": None,
        "class_labels": None,
        "normalizer": normalizer.to_dict() if normalizer else None,
        **overrides,
    }


def raw_rows() -> np.ndarray:
    rng = np.random.default_rng(3)
    return np.stack([rng.normal(5, 2, 200), rng.uniform(-30, 10, 200), rng.exponential(0.1, 200)], axis=1)


def trained_tensors(spec: dict[str, Any], weights: list[float], bias: float) -> dict[str, np.ndarray]:
    """A real Network's parameters (so the names are the ones the trainer writes), set to known values."""
    net = Network(parse_network(spec))
    named = dict(net.named_parameters())
    with torch.no_grad():
        named["layers.0.linear.weight"].copy_(torch.tensor([weights]))
        named["layers.0.linear.bias"].copy_(torch.tensor([bias]))
    return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}


@pytest.mark.parametrize("kind", ["standardize", "minmax"])
def test_folded_weights_give_the_same_predictions_on_raw_rows(kind: str) -> None:
    x = raw_rows()
    normalizer = normalizer_from(kind, Moments.of(x))  # type: ignore[arg-type]
    spec = network(OUTPUT)
    tensors = trained_tensors(spec, [0.5, -1.25, 2.0], 0.75)
    expected = normalizer.apply(x).astype(np.float64) @ np.array([0.5, -1.25, 2.0]) + 0.75

    model = linear.linear_model(spec, card(normalizer), tensors)

    assert model is not None and list(model["weights"]) == FEATURES
    raw = x @ np.array([model["weights"][f] for f in FEATURES]) + model["bias"]
    np.testing.assert_allclose(raw, expected, rtol=1e-5, atol=1e-4)
    scale = np.array(normalizer.scale)
    np.testing.assert_allclose([model["weights"][f] for f in FEATURES], np.array([0.5, -1.25, 2.0]) / scale, rtol=1e-6)


def test_fold_by_hand() -> None:
    w, b = linear.fold(np.array([2.0, 3.0]), 1.0, {"kind": "standardize", "shift": [10.0, -1.0], "scale": [4.0, 0.5]})
    # 2 * (x1 - 10) / 4 + 3 * (x2 + 1) / 0.5 + 1 = 0.5 x1 + 6 x2 + (1 - 5 + 6)
    np.testing.assert_allclose(w, [0.5, 6.0])
    assert b == pytest.approx(2.0)
    image_w, image_b = linear.fold(np.array([2.0, 4.0]), 1.0, {"kind": "image", "shift": [0.0], "scale": [255.0]})
    np.testing.assert_allclose(image_w, [2 / 255, 4 / 255])
    assert image_b == 1.0


def test_without_normalizer_the_weights_are_the_parameters() -> None:
    spec = network(OUTPUT)
    model = linear.linear_model(spec, card(), trained_tensors(spec, [1.0, 2.0, 3.0], -4.0))
    assert model == {"weights": {"a": 1.0, "b": 2.0, "c": 3.0}, "bias": -4.0}


@pytest.mark.parametrize(
    ("layers", "overrides"),
    [
        ([{"type": "dense", "units": 4, "activation": "identity"}, OUTPUT], {}),
        ([{"type": "batch_norm"}, OUTPUT], {}),
        ([{**OUTPUT, "activation": "relu"}], {}),
        ([{**OUTPUT, "units": 2}], {"labels": ["y", "z"]}),
        ([{**OUTPUT, "activation": "sigmoid", "loss": "binary_cross_entropy"}], {"task": "classification"}),
        ([OUTPUT], {"array_column": True, "features": ["pixels"]}),
    ],
    ids=["hidden-layer", "batch-norm", "relu-output", "two-outputs", "logistic", "array-column"],
)
def test_not_a_linear_regression_reports_nothing(layers: list[dict[str, Any]], overrides: dict[str, Any]) -> None:
    spec = network(*layers)
    tensors = {k: v.detach().numpy() for k, v in Network(parse_network(spec)).state_dict().items()}
    assert not linear.is_linear(spec, card(**overrides))
    assert linear.linear_model(spec, card(**overrides), tensors) is None
