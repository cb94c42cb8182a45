"""A trained linear model in the units of the data: ``y = sum(w[f] * x[f]) + b`` over the raw feature columns.

When a torch network is one ``output`` layer with identity activation on tabular feature columns (a linear
regression), its weights are read back from the registered model, the dataset's fitted normalizer is folded into
them, and the job result reports them by feature name. With ``x' = (x - shift) / scale``::

    w[f] = w'[f] / scale[f]        b = b' - sum(w'[f] * shift[f] / scale[f])

When the training data comes with a ``truth.json`` in the same directory (``{"weights": {feature: w}, "bias": b}``,
as ``python -m datasets linear`` writes it), the report also holds the truth and the error of the fit (the seed
article's "error in estimating w and b"). A feature the truth does not name has a true weight of 0, and a true
feature the model was not given has a fitted weight of 0.

Driver-side: reads the model artifact after the barrier stage (numpy and safetensors, no torch).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

TRUTH_FILE = "truth.json"
_WEIGHT, _BIAS = "layers.0.linear.weight", "layers.0.linear.bias"
"""The parameter names of a one-layer :class:`workers.training.torch.network.Network`."""


def is_linear(network: Mapping[str, Any], card: Mapping[str, Any]) -> bool:
    """One identity output unit on named numeric feature columns, for a regression."""
    layers = network.get("layers") or []
    if len(layers) != 1:
        return False
    out = layers[0]
    return (
        out.get("type") == "output"
        and out.get("activation") == "identity"
        and out.get("units") == 1
        and out.get("loss") in ("mse", "mae")
        and card.get("task") in (None, "regression")
        and not card.get("array_column")
        and len(card.get("features") or []) == math.prod(network.get("input_shape") or [0])
    )


def fold(weights: np.ndarray, bias: float, normalizer: Mapping[str, Any] | None) -> tuple[np.ndarray, float]:
    """Weights and bias of the normalized inputs -> the same function of the raw inputs."""
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if not normalizer:
        return w, float(bias)
    shift = np.broadcast_to(np.asarray(normalizer["shift"], dtype=np.float64), w.shape)
    scale = np.broadcast_to(np.asarray(normalizer["scale"], dtype=np.float64), w.shape)
    raw = w / scale
    return raw, float(bias) - float(np.dot(raw, shift))


def linear_model(
    network: Mapping[str, Any], card: Mapping[str, Any], tensors: Mapping[str, np.ndarray]
) -> dict[str, Any] | None:
    """``{"weights": {feature: w}, "bias": b}`` in raw feature units, or None when the network is not linear."""
    if not is_linear(network, card) or _WEIGHT not in tensors or _BIAS not in tensors:
        return None
    w, b = fold(np.asarray(tensors[_WEIGHT]), float(np.asarray(tensors[_BIAS]).reshape(-1)[0]), card.get("normalizer"))
    return {"weights": {f: float(v) for f, v in zip(card["features"], w, strict=True)}, "bias": b}


def read_truth(dataset_path: str, label: str | None = None) -> dict[str, Any] | None:
    """The ``truth.json`` beside a local dataset file or directory; None when there is none, it is remote, or it
    names another label. Raises ValueError when the file is there but is not a truth."""
    if "://" in dataset_path and not dataset_path.startswith("file:"):
        return None
    path = Path(dataset_path.removeprefix("file://")).parent / TRUTH_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        weights = {str(k): float(v) for k, v in data["weights"].items()}
        truth: dict[str, Any] = {"weights": weights, "bias": float(data["bias"])}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"{path} is not a truth file ({{'weights': {{feature: w}}, 'bias': b}}): {exc}") from exc
    if label is not None and data.get("label") not in (None, label):
        return None
    for key in ("noise_std", "seed", "label"):
        if key in data:
            truth[key] = data[key]
    return truth


def error(model: Mapping[str, Any], truth: Mapping[str, Any]) -> dict[str, float]:
    """How far the fitted weights and bias are from the true ones (absent weights count as 0)."""
    names = list(dict.fromkeys([*truth["weights"], *model["weights"]]))
    diff = np.array([model["weights"].get(n, 0.0) - truth["weights"].get(n, 0.0) for n in names], dtype=np.float64)
    return {
        "weights_max_abs": float(np.abs(diff).max()) if diff.size else 0.0,
        "weights_rmse": float(np.sqrt(np.mean(diff**2))) if diff.size else 0.0,
        "bias_abs": abs(float(model["bias"]) - float(truth["bias"])),
    }


def report(
    network: Mapping[str, Any],
    card: Mapping[str, Any],
    tensors: Mapping[str, np.ndarray],
    dataset_path: str,
) -> dict[str, Any] | None:
    """The job result's ``linear_model``: the fit, and its truth and error when the data ships a truth."""
    model = linear_model(network, card, tensors)
    if model is None:
        return None
    labels = card.get("labels") or []
    truth = read_truth(dataset_path, labels[0] if labels else None)
    if truth is not None:
        model["truth"] = truth
        model["error"] = error(model, truth)
    return model


def load_tensors(model_uri: str) -> dict[str, np.ndarray]:
    """The registered model's parameters (``weights.safetensors``) as numpy arrays."""
    from safetensors.numpy import load_file

    from workers import storage

    return load_file(str(storage.fetch_dir(model_uri) / "weights.safetensors"))
