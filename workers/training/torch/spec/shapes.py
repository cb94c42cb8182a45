"""Shape inference through a network's layers, checked in pure Python before any torch module exists.

Choices that the JSON contract leaves open:

* ``dense`` and ``output`` take only a flat ``(features,)`` input. A multi-dimensional input needs an
  explicit ``{"type": "flatten"}``: auto-flattening would hide a parameter-count jump and is ambiguous
  on ``(time, features)`` input (flatten all steps, or apply per step?).

No third-party imports, like the whole package: the API process imports it (see :mod:`workers.training.torch.spec`).
"""

from __future__ import annotations

import math

from workers.errors import SpecError
from workers.training.torch.spec.layers import (
    BatchNormSpec,
    Conv2dSpec,
    DenseSpec,
    DropoutSpec,
    FlattenSpec,
    LayerSpec,
    OutputSpec,
    Pool2dSpec,
    RecurrentSpec,
    ReshapeSpec,
)
from workers.training.torch.spec.reader import Shape, _fmt


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
                f"{layer.type} expects input (time, features), {got}; for data whose rows are the steps of "
                "sequences (an id and a step column) declare dataset.sequence (docs/datasets.md#sequences), else "
                "declare network.input_shape as [time, features] or add a reshape",
            )
        return (shape[0], layer.units) if layer.return_sequences else (layer.units,)
    raise TypeError(f"not a layer spec: {layer!r}")
