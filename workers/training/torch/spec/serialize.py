"""The JSON round trip of the specs: :func:`spec_to_dict` spells out every default, and ``parse_network`` /
``parse_optimizer`` invert it. Parse functions are the only validating constructors;
``parse_network(spec_to_dict(s)) == s``.

No third-party imports, like the whole package: the API process imports it (see :mod:`workers.training.torch.spec`).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from workers.numbers import shown
from workers.training.torch.spec.layers import LayerSpec
from workers.training.torch.spec.network import NetworkSpec
from workers.training.torch.spec.optimizer import _OPTIMIZER_KEYS, _SCHEDULE_KEYS, OptimizerSpec


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def _layer_to_dict(layer: LayerSpec) -> dict[str, Any]:
    return {"type": layer.type, **{f.name: _jsonable(getattr(layer, f.name)) for f in fields(layer)}}


def spec_to_dict(spec: NetworkSpec | OptimizerSpec) -> dict[str, Any]:
    """JSON-ready dict with every default spelled out; ``parse_network`` / ``parse_optimizer`` invert it."""
    if isinstance(spec, NetworkSpec):
        return {
            "input_shape": list(spec.input_shape),
            "layers": [_layer_to_dict(layer) for layer in spec.layers],
            "weight_init": spec.weight_init,
            "l2": spec.l2,
        }
    out: dict[str, Any] = {"type": spec.type}
    for key in _OPTIMIZER_KEYS[spec.type]:
        out[key] = _jsonable(getattr(spec, key))
    out["warmup_steps"] = spec.warmup_steps
    if spec.schedule is not None:
        schedule = spec.schedule
        out["schedule"] = {
            "type": schedule.type,
            **{k: getattr(schedule, k) for k in _SCHEDULE_KEYS[schedule.type]},
        }
    return out


def network_difference(
    trained: dict[str, Any], posted: dict[str, Any], inputs_from: str = "dataset.features"
) -> tuple[str, str]:
    """Where a posted network (:func:`spec_to_dict`) first differs from the one a checkpoint was trained with, as
    (field, what differs). The input shape comes from ``inputs_from`` (the features, by default: their count or
    their array column's length; or a declared ``input_shape``), the rest from ``network``."""
    if trained.get("input_shape") != posted.get("input_shape"):
        same = "the same features (and categories)" if inputs_from == "dataset.features" else f"the same {inputs_from}"
        return inputs_from, (
            f"the checkpoint's network takes inputs of shape {shown(trained.get('input_shape'))} and this request "
            f"gives {shown(posted.get('input_shape'))} ({inputs_from}): train with {same} as the checkpoint"
        )
    old, new = trained.get("layers") or [], posted.get("layers") or []
    if len(old) != len(new):
        return "network.layers", f"the checkpoint's network has {len(old)} layers, this request's {len(new)}"
    for i, (was, now) in enumerate(zip(old, new, strict=True)):
        for key in sorted(set(was) | set(now), key=lambda k: (k != "type", k)):
            if was.get(key) != now.get(key):
                return f"network.layers[{i}].{key}", _has(was.get(key), now.get(key))
    for key in sorted(set(trained) | set(posted)):
        if trained.get(key) != posted.get(key):
            return f"network.{key}", _has(trained.get(key), posted.get(key))
    return "network", "it differs from the checkpoint's network"


def _has(was: Any, now: Any) -> str:
    return f"the checkpoint has {shown(was)}, this request {shown(now)}"
