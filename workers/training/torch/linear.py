"""A trained linear model in the units of the data: ``y = sum(w[f] * x[f]) + b`` over the raw feature columns.

When a torch network is one ``output`` layer with identity activation on tabular feature columns (a linear
regression), its weights are read back from the registered model, the dataset's fitted normalizer is folded into
them, and the job result reports them by feature name. With ``x' = (x - shift) / scale``::

    w[f] = w'[f] / scale[f]        b = b' - sum(w'[f] * shift[f] / scale[f])

How far such a fit is from known true weights is the demo's business, not the job's:
:func:`datasets.linear.compare` measures it against the ``truth.json`` that ``python -m datasets linear`` writes.

Driver-side: reads the model artifact after the barrier stage (numpy and safetensors, no torch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

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


def load_tensors(model_uri: str) -> dict[str, np.ndarray]:
    """The registered model's parameters (``weights.safetensors``) as numpy arrays."""
    from safetensors.numpy import load_file

    from workers import storage

    return load_file(str(storage.fetch_dir(model_uri) / "weights.safetensors"))
