"""The layer specs of a network and the parsing of the request's ``network.layers`` entries.

Choices that the JSON contract leaves open:

* ``cross_entropy`` and ``binary_cross_entropy`` take logits. The output layer's ``softmax`` /
  ``sigmoid`` activation is folded into the loss and into ``predict_transform``; the module itself
  never applies it, so it is never applied twice. ``identity`` means the same thing.
* One layer type beyond the contract, ``{"type": "reshape", "shape": [1, 8, 8]}``, so that flat
  features can feed conv2d/lstm mid-network; ``network.input_shape`` does the same at the input.

No third-party imports, like the whole package: the API process imports it (see :mod:`workers.training.torch.spec`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal, TypeAlias

from workers.errors import SpecError
from workers.training.torch.spec.reader import Pair, Shape, _Obj, _pair_value, _shape_value, _show

ACTIVATIONS = ("relu", "leaky_relu", "elu", "gelu", "tanh", "sigmoid", "softmax", "identity")
LOSSES = ("mse", "mae", "cross_entropy", "binary_cross_entropy")

_LOGIT_ACTIVATIONS = {
    "cross_entropy": ("softmax", "identity"),
    "binary_cross_entropy": ("sigmoid", "identity"),
}

# --- layers -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DenseSpec:
    type: ClassVar[str] = "dense"
    units: int
    activation: str
    bias: bool = True


@dataclass(frozen=True)
class Conv2dSpec:
    type: ClassVar[str] = "conv2d"
    filters: int
    kernel_size: Pair
    activation: str
    stride: Pair = (1, 1)
    padding: Pair | Literal["same"] = (0, 0)
    bias: bool = True


@dataclass(frozen=True)
class Pool2dSpec:
    type: ClassVar[str] = "pool2d"
    kernel_size: Pair
    stride: Pair


@dataclass(frozen=True)
class MaxPool2dSpec(Pool2dSpec):
    type: ClassVar[str] = "max_pool2d"


@dataclass(frozen=True)
class AvgPool2dSpec(Pool2dSpec):
    type: ClassVar[str] = "avg_pool2d"


@dataclass(frozen=True)
class BatchNormSpec:
    """BatchNorm1d after a flat input, BatchNorm2d after a (channels, height, width) input."""

    type: ClassVar[str] = "batch_norm"


@dataclass(frozen=True)
class DropoutSpec:
    type: ClassVar[str] = "dropout"
    rate: float


@dataclass(frozen=True)
class FlattenSpec:
    type: ClassVar[str] = "flatten"


@dataclass(frozen=True)
class ReshapeSpec:
    type: ClassVar[str] = "reshape"
    shape: Shape


@dataclass(frozen=True)
class RecurrentSpec:
    type: ClassVar[str] = "recurrent"
    units: int
    return_sequences: bool = False


@dataclass(frozen=True)
class LstmSpec(RecurrentSpec):
    type: ClassVar[str] = "lstm"


@dataclass(frozen=True)
class GruSpec(RecurrentSpec):
    type: ClassVar[str] = "gru"


@dataclass(frozen=True)
class OutputSpec:
    type: ClassVar[str] = "output"
    units: int
    activation: str
    loss: str


LayerSpec: TypeAlias = (
    DenseSpec
    | Conv2dSpec
    | MaxPool2dSpec
    | AvgPool2dSpec
    | BatchNormSpec
    | DropoutSpec
    | FlattenSpec
    | ReshapeSpec
    | LstmSpec
    | GruSpec
    | OutputSpec
)

# --- layer parsing ------------------------------------------------------------------------------


def _hidden_activation(obj: _Obj, layer_type: str) -> str:
    activation = obj.choice("activation", ACTIVATIONS, "activation")
    if activation == "softmax" and layer_type != "dense":
        raise SpecError(obj.at("activation"), f"softmax is only allowed on dense and output layers, not {layer_type}")
    return activation


def _parse_dense(obj: _Obj) -> DenseSpec:
    return DenseSpec(
        units=obj.integer("units"),
        activation=_hidden_activation(obj, "dense"),
        bias=obj.flag("bias", True),
    )


def _parse_conv2d(obj: _Obj) -> Conv2dSpec:
    filters = obj.integer("filters")
    kernel_size = obj.pair("kernel_size")
    stride = obj.pair("stride", 1)
    raw_padding = obj.raw("padding", 0)
    padding: Pair | Literal["same"] | None
    if raw_padding == "same":
        if stride != (1, 1):
            raise SpecError(
                obj.at("padding"),
                f"'same' needs stride 1, got stride {list(stride)}; give the padding as numbers",
            )
        padding = "same"
    else:
        padding = (0, 0) if raw_padding == "valid" else _pair_value(raw_padding, minimum=0)
        if padding is None:
            raise SpecError(
                obj.at("padding"),
                f"must be a non-negative integer, a pair, 'same' or 'valid', got {_show(raw_padding)}",
            )
    return Conv2dSpec(
        filters=filters,
        kernel_size=kernel_size,
        activation=_hidden_activation(obj, "conv2d"),
        stride=stride,
        padding=padding,
        bias=obj.flag("bias", True),
    )


def _parse_pool(cls: type[MaxPool2dSpec] | type[AvgPool2dSpec]) -> Callable[[_Obj], LayerSpec]:
    def parse(obj: _Obj) -> LayerSpec:
        kernel_size = obj.pair("kernel_size")
        return cls(kernel_size=kernel_size, stride=obj.pair("stride", list(kernel_size)))

    return parse


def _parse_dropout(obj: _Obj) -> DropoutSpec:
    return DropoutSpec(rate=obj.number("rate", low=0.0, high=1.0, high_open=True))


def _parse_reshape(obj: _Obj) -> ReshapeSpec:
    return ReshapeSpec(shape=_shape_value(obj.raw("shape"), obj.at("shape")))


def _parse_recurrent(cls: type[LstmSpec] | type[GruSpec]) -> Callable[[_Obj], LayerSpec]:
    def parse(obj: _Obj) -> LayerSpec:
        return cls(units=obj.integer("units"), return_sequences=obj.flag("return_sequences", False))

    return parse


def _parse_output(obj: _Obj) -> OutputSpec:
    units = obj.integer("units")
    activation = obj.choice("activation", ACTIVATIONS, "activation")
    loss = obj.choice("loss", LOSSES, "loss")
    allowed = _LOGIT_ACTIVATIONS.get(loss)
    if allowed is not None and activation not in allowed:
        raise SpecError(
            obj.at("activation"),
            f"{loss} takes logits: use activation {' or '.join(allowed)} (the {allowed[0]} is folded into "
            f"the loss and applied only to predictions), got {_show(activation)}",
        )
    if loss == "cross_entropy" and units < 2:
        raise SpecError(
            obj.at("units"),
            "cross_entropy is a classification loss and needs units >= 2 (one per class); for two classes use "
            "units 2, or units 1 with binary_cross_entropy; a regression takes mse or mae",
        )
    return OutputSpec(units=units, activation=activation, loss=loss)


_LAYER_CLASSES: dict[str, type] = {
    cls.type: cls
    for cls in (
        DenseSpec,
        Conv2dSpec,
        MaxPool2dSpec,
        AvgPool2dSpec,
        BatchNormSpec,
        DropoutSpec,
        FlattenSpec,
        ReshapeSpec,
        LstmSpec,
        GruSpec,
        OutputSpec,
    )
}
_LAYER_PARSERS: dict[str, Callable[[_Obj], LayerSpec]] = {
    "dense": _parse_dense,
    "conv2d": _parse_conv2d,
    "max_pool2d": _parse_pool(MaxPool2dSpec),
    "avg_pool2d": _parse_pool(AvgPool2dSpec),
    "batch_norm": lambda obj: BatchNormSpec(),
    "dropout": _parse_dropout,
    "flatten": lambda obj: FlattenSpec(),
    "reshape": _parse_reshape,
    "lstm": _parse_recurrent(LstmSpec),
    "gru": _parse_recurrent(GruSpec),
    "output": _parse_output,
}
LAYER_TYPES = tuple(sorted(_LAYER_CLASSES))


def _parse_layer(value: Any, path: str) -> LayerSpec:
    if not isinstance(value, Mapping):
        raise SpecError(path, f"must be an object with a 'type', got {_show(value)}")
    layer_type = value.get("type")
    if not isinstance(layer_type, str) or layer_type not in _LAYER_CLASSES:
        shown = "missing" if layer_type is None else f"unknown layer type {_show(layer_type)}"
        raise SpecError(f"{path}.type", f"{shown}; known: {', '.join(LAYER_TYPES)}")
    allowed = ("type", *(f.name for f in fields(_LAYER_CLASSES[layer_type])))
    return _LAYER_PARSERS[layer_type](_Obj(value, path, allowed, f"a {layer_type} layer"))
