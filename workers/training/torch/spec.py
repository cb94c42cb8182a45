"""The network and optimizer a user posts: parsed, validated and shape-checked in pure Python.

The API process imports this module to reject a bad request before any job runs, so it must not
import torch (or numpy, pydantic, ...). ``network.py`` and ``optim.py`` turn these specs into torch
objects on the executors.

Choices that the JSON contract leaves open:

* ``dense`` and ``output`` take only a flat ``(features,)`` input. A multi-dimensional input needs an
  explicit ``{"type": "flatten"}``: auto-flattening would hide a parameter-count jump and is ambiguous
  on ``(time, features)`` input (flatten all steps, or apply per step?).
* ``cross_entropy`` and ``binary_cross_entropy`` take logits. The output layer's ``softmax`` /
  ``sigmoid`` activation is folded into the loss and into ``predict_transform``; the module itself
  never applies it, so it is never applied twice. ``identity`` means the same thing.
* ``network.l2`` is applied as torch ``weight_decay`` on weight matrices and kernels (parameters with
  two or more dimensions) only, never on biases or batch-norm scale/shift. With sgd, adam and rmsprop
  that is the classic L2 penalty ``l2/2 * ||w||^2`` in the gradient. ``adamw`` has its own decoupled
  ``weight_decay``: setting both it and ``l2`` is rejected (``check_optimizer_l2``); with adamw
  ``weight_decay: 0``, ``l2`` is used as the decoupled decay.
* Learning-rate schedules count optimizer steps (iterations), not epochs: the trainer calls
  ``scheduler.step()`` once per iteration, and a resumed run only needs the step counter. Warm-up
  runs first; the main schedule's own counter starts when warm-up ends.
* One layer type beyond the contract, ``{"type": "reshape", "shape": [1, 8, 8]}``, so that flat
  features can feed conv2d/lstm mid-network; ``network.input_shape`` does the same at the input.
* Parse functions are the only validating constructors; ``parse_network(spec_to_dict(s)) == s``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal, TypeAlias

from workers.errors import SpecError

Shape: TypeAlias = tuple[int, ...]
Pair: TypeAlias = tuple[int, int]

ACTIVATIONS = ("relu", "leaky_relu", "elu", "gelu", "tanh", "sigmoid", "softmax", "identity")
LOSSES = ("mse", "mae", "cross_entropy", "binary_cross_entropy")
WEIGHT_INITS = (
    "xavier_uniform",
    "xavier_normal",
    "kaiming_uniform",
    "kaiming_normal",
    "normal",
    "uniform",
    "zeros",
)
OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop")
SCHEDULES = ("step", "exponential", "cosine")
TASKS = ("classification", "regression")

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


@dataclass(frozen=True)
class NetworkSpec:
    """A validated network. ``shapes[i]`` is the output shape of ``layers[i]`` (batch dimension excluded).

    Construction re-checks the layer order and shape chain, so every instance is buildable.
    """

    input_shape: Shape
    layers: tuple[LayerSpec, ...]
    weight_init: str = "xavier_uniform"
    l2: float = 0.0
    shapes: tuple[Shape, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_output_position(self.layers)
        object.__setattr__(self, "shapes", _infer_shapes(self.input_shape, self.layers))

    @property
    def output(self) -> OutputSpec:
        layer = self.layers[-1]
        assert isinstance(layer, OutputSpec)
        return layer

    @property
    def loss(self) -> str:
        return self.output.loss

    @property
    def output_units(self) -> int:
        return self.output.units

    @property
    def output_shape(self) -> Shape:
        return self.shapes[-1]

    @property
    def is_recurrent(self) -> bool:
        return any(isinstance(layer, RecurrentSpec) for layer in self.layers)


# --- optimizer ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleSpec:
    """A learning-rate schedule counted in optimizer steps; only the fields of ``type`` are meaningful.

    step: ``lr * gamma ** (t // step_size)``; exponential: ``lr * gamma ** t``;
    cosine: from ``lr`` down to ``min_lr`` over ``t_max`` steps, then stays at ``min_lr``.
    """

    type: str
    step_size: int = 1
    gamma: float = 0.1
    t_max: int = 1
    min_lr: float = 0.0


@dataclass(frozen=True)
class OptimizerSpec:
    """Only the fields of ``type`` are meaningful (see ``_OPTIMIZER_KEYS``)."""

    type: str
    learning_rate: float
    momentum: float = 0.0
    nesterov: bool = False
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    alpha: float = 0.99
    warmup_steps: int = 0
    schedule: ScheduleSpec | None = None


_OPTIMIZER_KEYS: dict[str, tuple[str, ...]] = {
    "sgd": ("learning_rate", "momentum", "nesterov"),
    "adam": ("learning_rate", "betas", "eps"),
    "adamw": ("learning_rate", "betas", "eps", "weight_decay"),
    "rmsprop": ("learning_rate", "alpha", "momentum", "eps"),
}
_SCHEDULE_KEYS: dict[str, tuple[str, ...]] = {
    "step": ("step_size", "gamma"),
    "exponential": ("gamma",),
    "cosine": ("t_max", "min_lr"),
}
_ADAMW_DEFAULT_WEIGHT_DECAY = 0.01


# --- reading JSON -------------------------------------------------------------------------------

_MISSING: Any = object()


def _show(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _quoted(names: list[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class _Obj:
    """A JSON object being read; remembers its path so every error names the exact field."""

    def __init__(self, value: Any, path: str, allowed: tuple[str, ...], what: str) -> None:
        if not isinstance(value, Mapping):
            raise SpecError(path, f"must be an object, got {_show(value)}")
        unknown = sorted(str(key) for key in value if key not in allowed)
        if unknown:
            noun = "key" if len(unknown) == 1 else "keys"
            raise SpecError(
                path, f"unknown {noun} {_quoted(unknown)} for {what}; allowed: {', '.join(sorted(allowed))}"
            )
        self.value = value
        self.path = path

    def at(self, key: str) -> str:
        return f"{self.path}.{key}"

    def has(self, key: str) -> bool:
        return self.value.get(key) is not None

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        value = self.value.get(key)
        if value is None:
            if default is _MISSING:
                raise SpecError(self.at(key), "is required")
            return default
        return value

    def integer(self, key: str, default: Any = _MISSING, *, minimum: int = 1) -> int:
        value = self.raw(key, default)
        if not _is_int(value) or value < minimum:
            kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise SpecError(self.at(key), f"must be {kind}, got {_show(value)}")
        return int(value)

    def number(
        self,
        key: str,
        default: Any = _MISSING,
        *,
        low: float = -math.inf,
        high: float = math.inf,
        low_open: bool = False,
        high_open: bool = False,
    ) -> float:
        value = self.raw(key, default)
        ok = _is_number(value)
        if ok:
            ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
        if not ok:
            raise SpecError(
                self.at(key), f"must be {_describe_range(low, high, low_open, high_open)}, got {_show(value)}"
            )
        return float(value)

    def flag(self, key: str, default: Any = _MISSING) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise SpecError(self.at(key), f"must be true or false, got {_show(value)}")
        return value

    def choice(self, key: str, options: tuple[str, ...], what: str, default: Any = _MISSING) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str) or value not in options:
            raise SpecError(self.at(key), f"unknown {what} {_show(value)}; known: {', '.join(options)}")
        return value

    def pair(self, key: str, default: Any = _MISSING) -> Pair:
        value = self.raw(key, default)
        pair = _pair_value(value, minimum=1)
        if pair is None:
            raise SpecError(self.at(key), f"must be a positive integer or a pair, got {_show(value)}")
        return pair


def _pair_value(value: Any, *, minimum: int) -> Pair | None:
    if _is_int(value) and value >= minimum:
        return (int(value), int(value))
    if isinstance(value, list | tuple) and len(value) == 2 and all(_is_int(v) and v >= minimum for v in value):
        return (int(value[0]), int(value[1]))
    return None


def _describe_range(low: float, high: float, low_open: bool, high_open: bool) -> str:
    if high == math.inf:
        if low == -math.inf:
            return "a number"
        if low == 0:
            return "a positive number" if low_open else "a number >= 0"
        return f"a number {'>' if low_open else '>='} {low:g}"
    return f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def _shape_value(value: Any, path: str) -> Shape:
    if not isinstance(value, list | tuple) or not 1 <= len(value) <= 3 or not all(_is_int(v) and v >= 1 for v in value):
        raise SpecError(
            path,
            "must be a list of 1 to 3 positive integers: [features], [time, features] or "
            f"[channels, height, width], got {_show(value)}",
        )
    return tuple(int(v) for v in value)


def _fmt(shape: Shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


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
            "cross_entropy needs units >= 2 (one per class); for two classes use units 2, "
            "or units 1 with binary_cross_entropy",
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


# --- network ------------------------------------------------------------------------------------


def parse_network(obj: Any, *, input_shape: Shape | None = None) -> NetworkSpec:
    """Parse the request's ``network`` object.

    ``input_shape`` is the per-row shape the dataset provides. When the network also declares one,
    the declared shape wins provided it holds the same number of values (the rows are reshaped,
    e.g. 64 pixel columns read as ``[1, 8, 8]``).
    """
    network = _Obj(obj, "network", ("input_shape", "layers", "weight_init", "l2"), "network")
    data_shape = None if input_shape is None else _shape_value(input_shape, "input_shape (from the dataset)")
    if network.has("input_shape"):
        shape = _shape_value(network.raw("input_shape"), network.at("input_shape"))
        if data_shape is not None and math.prod(shape) != math.prod(data_shape):
            raise SpecError(
                network.at("input_shape"),
                f"{_fmt(shape)} holds {math.prod(shape)} values but the dataset rows have shape "
                f"{_fmt(data_shape)} ({math.prod(data_shape)} values); fix it or leave input_shape out",
            )
    elif data_shape is not None:
        shape = data_shape
    else:
        raise SpecError(network.at("input_shape"), "is required when the dataset does not determine it")

    raw_layers = network.raw("layers")
    if not isinstance(raw_layers, list | tuple) or not raw_layers:
        raise SpecError(network.at("layers"), f"must be a non-empty list of layers, got {_show(raw_layers)}")
    layers = tuple(_parse_layer(layer, f"network.layers[{i}]") for i, layer in enumerate(raw_layers))
    return NetworkSpec(
        input_shape=shape,
        layers=layers,
        weight_init=network.choice("weight_init", WEIGHT_INITS, "weight_init", "xavier_uniform"),
        l2=network.number("l2", 0.0, low=0.0),
    )


def _check_output_position(layers: tuple[LayerSpec, ...]) -> None:
    outputs = [i for i, layer in enumerate(layers) if isinstance(layer, OutputSpec)]
    if not outputs:
        raise SpecError(
            "network.layers",
            'the last layer must be {"type": "output", "units": ..., "activation": ..., "loss": ...}; '
            "there is no output layer",
        )
    if len(outputs) > 1:
        raise SpecError(
            f"network.layers[{outputs[1]}]",
            f"more than one output layer (the first is layers[{outputs[0]}]); keep only the last one",
        )
    if outputs[0] != len(layers) - 1:
        after = len(layers) - 1 - outputs[0]
        raise SpecError(
            f"network.layers[{outputs[0]}]",
            f"the output layer must be the last layer, but {after} "
            f"{'layers follow' if after > 1 else 'layer follows'} it",
        )


def _conv_out(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def _infer_shapes(input_shape: Shape, layers: tuple[LayerSpec, ...]) -> tuple[Shape, ...]:
    shapes: list[Shape] = []
    shape = input_shape
    per_step = False  # the shape is (time, features) coming out of an lstm/gru with return_sequences
    for i, layer in enumerate(layers):
        source = "the input" if i == 0 else f"layers[{i - 1}] ({layers[i - 1].type})"
        shape = _layer_output_shape(layer, shape, f"network.layers[{i}]", source, per_step)
        if isinstance(layer, RecurrentSpec):
            per_step = layer.return_sequences
        elif not isinstance(layer, DenseSpec | DropoutSpec | OutputSpec):
            per_step = False
        shapes.append(shape)
    return tuple(shapes)


def _layer_output_shape(layer: LayerSpec, shape: Shape, path: str, source: str, per_step: bool = False) -> Shape:
    got = f"got {_fmt(shape)} from {source}"
    if isinstance(layer, DenseSpec | OutputSpec):
        if len(shape) == 2 and per_step:
            return (shape[0], layer.units)  # applied at every step of an lstm/gru with return_sequences
        if len(shape) != 1:
            raise SpecError(path, f'{layer.type} expects input (features,), {got}; add {{"type": "flatten"}} before it')
        return (layer.units,)
    if isinstance(layer, Conv2dSpec | Pool2dSpec):
        if len(shape) != 3:
            raise SpecError(
                path,
                f"{layer.type} expects input (channels, height, width), {got}; "
                'add {"type": "reshape", "shape": [channels, height, width]} or use dense',
            )
        channels, height, width = shape
        padding = (0, 0) if isinstance(layer, Pool2dSpec) else layer.padding
        if padding == "same":
            out_h, out_w = height, width
        else:
            out_h = _conv_out(height, layer.kernel_size[0], layer.stride[0], padding[0])
            out_w = _conv_out(width, layer.kernel_size[1], layer.stride[1], padding[1])
            if out_h < 1 or out_w < 1:
                kh, kw = layer.kernel_size
                raise SpecError(
                    path,
                    f"{layer.type} kernel {kh}x{kw} (stride {layer.stride[0]}x{layer.stride[1]}, padding "
                    f"{padding[0]}x{padding[1]}) does not fit the {height}x{width} input {_fmt(shape)} from "
                    f"{source}: output would be {out_h}x{out_w}; use a smaller kernel_size or stride, "
                    "or more padding",
                )
        out_channels = layer.filters if isinstance(layer, Conv2dSpec) else channels
        return (out_channels, out_h, out_w)
    if isinstance(layer, BatchNormSpec):
        if len(shape) not in (1, 3):
            raise SpecError(path, f"batch_norm expects input (features,) or (channels, height, width), {got}")
        return shape
    if isinstance(layer, DropoutSpec):
        return shape
    if isinstance(layer, FlattenSpec):
        return (math.prod(shape),)
    if isinstance(layer, ReshapeSpec):
        if math.prod(layer.shape) != math.prod(shape):
            raise SpecError(
                path,
                f"reshape cannot turn {_fmt(shape)} ({math.prod(shape)} values) from {source} into "
                f"{_fmt(layer.shape)} ({math.prod(layer.shape)} values)",
            )
        return layer.shape
    if isinstance(layer, RecurrentSpec):
        if len(shape) != 2:
            raise SpecError(
                path,
                f"{layer.type} expects input (time, features), {got}; declare network.input_shape as "
                "[time, features] or add a reshape",
            )
        return (shape[0], layer.units) if layer.return_sequences else (layer.units,)
    raise TypeError(f"not a layer spec: {layer!r}")


def parameter_count(spec: NetworkSpec) -> int:
    """Exactly ``sum(p.numel() for p in build_network(spec).parameters())``; buffers are not counted."""
    total = 0
    incoming = spec.input_shape
    for layer, shape in zip(spec.layers, spec.shapes, strict=True):
        if isinstance(layer, DenseSpec | OutputSpec):
            bias = layer.bias if isinstance(layer, DenseSpec) else True
            total += incoming[-1] * layer.units + (layer.units if bias else 0)
        elif isinstance(layer, Conv2dSpec):
            kh, kw = layer.kernel_size
            total += layer.filters * incoming[0] * kh * kw + (layer.filters if layer.bias else 0)
        elif isinstance(layer, BatchNormSpec):
            total += 2 * incoming[0]
        elif isinstance(layer, RecurrentSpec):
            gates = 4 if isinstance(layer, LstmSpec) else 3
            units = layer.units
            total += gates * (incoming[-1] * units + units * units + 2 * units)
        incoming = shape
    return total


def check_loss_for_task(spec: NetworkSpec, task: str, num_classes: int | None, label_width: int) -> None:
    """Check that the output layer fits the dataset's labels.

    ``num_classes`` is the number of distinct classes (classification only); ``label_width`` is the
    number of label columns (regression targets per row).
    """
    if task not in TASKS:
        raise SpecError("task", f"unknown task {_show(task)}; known: {', '.join(TASKS)}")
    index = len(spec.layers) - 1
    at = f"network.layers[{index}]"
    output = spec.output
    loss, units = output.loss, output.units
    if loss in ("cross_entropy", "binary_cross_entropy"):
        if task != "classification":
            raise SpecError(f"{at}.loss", f"{loss} needs a classification task, the task is {task}; use mse or mae")
        if num_classes is None or num_classes < 2:
            raise SpecError(f"{at}.loss", f"{loss} needs at least 2 classes, the dataset has {num_classes}")
        if loss == "cross_entropy" and units != num_classes:
            raise SpecError(
                f"{at}.units",
                f"cross_entropy needs one output unit per class: the dataset has {num_classes} classes, "
                f"the output layer has {units} units; set units to {num_classes}",
            )
        if loss == "binary_cross_entropy":
            if num_classes != 2:
                raise SpecError(
                    f"{at}.loss",
                    f"binary_cross_entropy handles 2 classes, the dataset has {num_classes}; use "
                    f'"loss": "cross_entropy" with units {num_classes}',
                )
            if units != 1:
                raise SpecError(
                    f"{at}.units",
                    f"binary_cross_entropy needs 1 output unit (the logit of class 1), got {units}; set "
                    "units to 1, or use cross_entropy with units 2",
                )
        return
    if task != "regression":
        classes = num_classes if num_classes is not None else "num_classes"
        raise SpecError(
            f"{at}.loss",
            f"{loss} needs a regression task, the task is classification; use cross_entropy with units "
            f"{classes} (or binary_cross_entropy with units 1 for 2 classes)",
        )
    if units != label_width:
        raise SpecError(
            f"{at}.units",
            f"{loss} needs one output unit per label column: the labels have {label_width} "
            f"column{'s' if label_width != 1 else ''}, the output layer has {units} units; set units to "
            f"{label_width}",
        )


# --- optimizer ----------------------------------------------------------------------------------


def parse_optimizer(obj: Any) -> OptimizerSpec:
    """Parse ``training.optimizer``. Schedules and ``warmup_steps`` count optimizer steps, not epochs."""
    path = "training.optimizer"
    if not isinstance(obj, Mapping):
        raise SpecError(path, f"must be an object with a 'type', got {_show(obj)}")
    kind = obj.get("type")
    if kind not in OPTIMIZERS:
        shown = "missing" if kind is None else f"unknown optimizer {_show(kind)}"
        raise SpecError(f"{path}.type", f"{shown}; known: {', '.join(OPTIMIZERS)}")
    allowed = ("type", *_OPTIMIZER_KEYS[kind], "warmup_steps", "schedule")
    opt = _Obj(obj, path, allowed, f"the {kind} optimizer")
    learning_rate = opt.number("learning_rate", low=0.0, low_open=True)
    values: dict[str, Any] = {}
    if "momentum" in allowed:
        values["momentum"] = opt.number("momentum", 0.0, low=0.0, high=1.0, high_open=True)
    if kind == "sgd":
        values["nesterov"] = opt.flag("nesterov", False)
        if values["nesterov"] and values["momentum"] == 0:
            raise SpecError(opt.at("nesterov"), "needs momentum > 0; set momentum (e.g. 0.9) or drop nesterov")
    if "betas" in allowed:
        betas = opt.raw("betas", [0.9, 0.999])
        if (
            not isinstance(betas, list | tuple)
            or len(betas) != 2
            or not all(_is_number(b) and 0 <= b < 1 for b in betas)
        ):
            raise SpecError(opt.at("betas"), f"must be two numbers in [0, 1), got {_show(betas)}")
        values["betas"] = (float(betas[0]), float(betas[1]))
    if "eps" in allowed:
        values["eps"] = opt.number("eps", 1e-8, low=0.0, low_open=True)
    if "weight_decay" in allowed:
        values["weight_decay"] = opt.number("weight_decay", _ADAMW_DEFAULT_WEIGHT_DECAY, low=0.0)
    if "alpha" in allowed:
        values["alpha"] = opt.number("alpha", 0.99, low=0.0, high=1.0, low_open=True, high_open=True)
    schedule = None
    if opt.has("schedule"):
        schedule = _parse_schedule(opt.raw("schedule"), opt.at("schedule"), learning_rate)
    return OptimizerSpec(
        type=kind,
        learning_rate=learning_rate,
        warmup_steps=opt.integer("warmup_steps", 0, minimum=0),
        schedule=schedule,
        **values,
    )


def _parse_schedule(obj: Any, path: str, learning_rate: float) -> ScheduleSpec:
    if not isinstance(obj, Mapping):
        raise SpecError(path, f"must be an object with a 'type', got {_show(obj)}")
    kind = obj.get("type")
    if kind not in SCHEDULES:
        shown = "missing" if kind is None else f"unknown schedule {_show(kind)}"
        raise SpecError(f"{path}.type", f"{shown}; known: {', '.join(SCHEDULES)}")
    sched = _Obj(obj, path, ("type", *_SCHEDULE_KEYS[kind]), f"the {kind} schedule")
    if kind == "step":
        return ScheduleSpec(
            type=kind,
            step_size=sched.integer("step_size"),
            gamma=sched.number("gamma", 0.1, low=0.0, high=1.0, low_open=True),
        )
    if kind == "exponential":
        return ScheduleSpec(type=kind, gamma=sched.number("gamma", low=0.0, high=1.0, low_open=True))
    min_lr = sched.number("min_lr", 0.0, low=0.0)
    if min_lr > learning_rate:
        raise SpecError(sched.at("min_lr"), f"must not exceed learning_rate {learning_rate:g}, got {min_lr:g}")
    return ScheduleSpec(type=kind, t_max=sched.integer("t_max"), min_lr=min_lr)


def check_optimizer_l2(optimizer: OptimizerSpec, l2: float) -> None:
    """adamw decays weights itself (decoupled); adding ``network.l2`` on top would mean two decays."""
    if optimizer.type == "adamw" and l2 > 0 and optimizer.weight_decay > 0:
        raise SpecError(
            "training.optimizer.weight_decay",
            f"adamw already applies decoupled weight_decay {optimizer.weight_decay:g} and cannot also apply "
            f"network.l2 {l2:g}; set one of them to 0 (for a plain L2 penalty with adaptive moments "
            "use adam)",
        )


# --- JSON round trip ----------------------------------------------------------------------------


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
