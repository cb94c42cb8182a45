"""The validated network: :class:`NetworkSpec`, parsed from the request's ``network`` object by
:func:`parse_network`, its :func:`parameter_count`, and :func:`check_loss_for_task`, which checks the output
layer against the dataset's labels.

No third-party imports, like the whole package: the API process imports it (see :mod:`workers.training.torch.spec`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from workers.errors import SpecError
from workers.training.torch.spec.layers import (
    BatchNormSpec,
    Conv2dSpec,
    DenseSpec,
    LayerSpec,
    LstmSpec,
    OutputSpec,
    RecurrentSpec,
    _parse_layer,
)
from workers.training.torch.spec.reader import Shape, _fmt, _Obj, _shape_value, _show
from workers.training.torch.spec.shapes import _infer_shapes

WEIGHT_INITS = (
    "xavier_uniform",
    "xavier_normal",
    "kaiming_uniform",
    "kaiming_normal",
    "normal",
    "uniform",
    "zeros",
)

TASKS = ("classification", "regression")


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
