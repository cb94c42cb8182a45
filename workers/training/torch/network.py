"""Build a torch module, its loss and its prediction transform from a ``NetworkSpec``.

Initialisation is deterministic and independent of torch's global RNG: the module is created on the
``meta`` device (no memory, no random draws), materialised on the CPU, and every parameter is then
initialised from a local ``torch.Generator(seed)`` in ``module.parameters()`` order. Same spec and
seed give bitwise-identical parameters on every machine with the same torch version; the caller
moves the module to its device afterwards.

Weights use ``spec.weight_init``; biases start at zero, batch-norm at scale 1 / shift 0.
``normal`` and ``uniform`` are scaled by fan-in as in DL4J: N(0, std=1/sqrt(fan_in)) and
U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the kaiming variants use the relu gain.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional

from workers.training.torch.spec import (
    AvgPool2dSpec,
    BatchNormSpec,
    Conv2dSpec,
    DenseSpec,
    DropoutSpec,
    FlattenSpec,
    GruSpec,
    LayerSpec,
    LstmSpec,
    MaxPool2dSpec,
    NetworkSpec,
    OutputSpec,
    RecurrentSpec,
    ReshapeSpec,
    Shape,
)


def _activation(name: str) -> nn.Module:
    if name == "relu":
        return nn.ReLU()
    if name == "leaky_relu":
        return nn.LeakyReLU(0.01)
    if name == "elu":
        return nn.ELU()
    if name == "gelu":
        return nn.GELU()
    if name == "tanh":
        return nn.Tanh()
    if name == "sigmoid":
        return nn.Sigmoid()
    if name == "softmax":
        return nn.Softmax(dim=-1)
    if name == "identity":
        return nn.Identity()
    raise ValueError(f"unknown activation {name!r}")


class _Affine(nn.Module):
    def __init__(self, linear: nn.Linear, activation: nn.Module) -> None:
        super().__init__()
        self.linear = linear
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.linear(x))


class _Conv(nn.Module):
    """``padding="same"`` is explicit zero padding (the odd pixel of an even kernel goes right/bottom, as
    in torch and Keras); torch's own ``padding="same"`` warns on every call with even kernels."""

    def __init__(self, spec: Conv2dSpec, in_channels: int) -> None:
        super().__init__()
        if spec.padding == "same":
            kh, kw = spec.kernel_size
            pads = ((kw - 1) // 2, kw // 2, (kh - 1) // 2, kh // 2)
            self.pad: nn.Module = nn.ZeroPad2d(pads) if any(pads) else nn.Identity()
            padding = (0, 0)
        else:
            self.pad = nn.Identity()
            padding = spec.padding
        self.conv = nn.Conv2d(
            in_channels,
            spec.filters,
            spec.kernel_size,
            stride=spec.stride,
            padding=padding,
            bias=spec.bias,
            dtype=torch.float32,
        )
        self.activation = _activation(spec.activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.conv(self.pad(x)))


class _Reshape(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.shape = shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], *self.shape)

    def extra_repr(self) -> str:
        return f"shape={self.shape}"


class _Recurrent(nn.Module):
    """Batch-first LSTM/GRU; without return_sequences it returns the last valid step of each sequence."""

    def __init__(self, rnn: nn.LSTM | nn.GRU, return_sequences: bool) -> None:
        super().__init__()
        self.rnn = rnn
        self.return_sequences = return_sequences

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        out, _ = self.rnn(x)
        if self.return_sequences:
            return out
        if lengths is None:
            return out[:, -1]
        # A unidirectional RNN's output at step L-1 does not depend on the padding after it.
        index = (lengths.to(device=out.device, dtype=torch.long) - 1).view(-1, 1, 1)
        return out.gather(1, index.expand(-1, 1, out.shape[2])).squeeze(1)


def _layer_module(layer: LayerSpec, incoming: Shape) -> nn.Module:
    if isinstance(layer, DenseSpec):
        return _Affine(
            nn.Linear(incoming[-1], layer.units, bias=layer.bias, dtype=torch.float32),
            _activation(layer.activation),
        )
    if isinstance(layer, OutputSpec):
        # Logit losses fold their softmax/sigmoid into the loss; see predict_transform.
        folded = layer.loss in ("cross_entropy", "binary_cross_entropy")
        activation = nn.Identity() if folded else _activation(layer.activation)
        return _Affine(nn.Linear(incoming[-1], layer.units, dtype=torch.float32), activation)
    if isinstance(layer, Conv2dSpec):
        return _Conv(layer, incoming[0])
    if isinstance(layer, MaxPool2dSpec):
        return nn.MaxPool2d(layer.kernel_size, stride=layer.stride)
    if isinstance(layer, AvgPool2dSpec):
        return nn.AvgPool2d(layer.kernel_size, stride=layer.stride)
    if isinstance(layer, BatchNormSpec):
        if len(incoming) == 1:
            return nn.BatchNorm1d(incoming[0], dtype=torch.float32)
        return nn.BatchNorm2d(incoming[0], dtype=torch.float32)
    if isinstance(layer, DropoutSpec):
        return nn.Dropout(layer.rate)
    if isinstance(layer, FlattenSpec):
        return nn.Flatten()
    if isinstance(layer, ReshapeSpec):
        return _Reshape(layer.shape)
    if isinstance(layer, LstmSpec | GruSpec):
        rnn_class = nn.LSTM if isinstance(layer, LstmSpec) else nn.GRU
        rnn = rnn_class(incoming[-1], layer.units, batch_first=True, dtype=torch.float32)
        return _Recurrent(rnn, layer.return_sequences)
    raise TypeError(f"not a layer spec: {layer!r}")


class Network(nn.Module):
    """``layers[i]`` implements ``spec.layers[i]``. Input: float32 ``(B, *input_shape)``, or flat rows
    ``(B, prod(input_shape))`` which are reshaped. Output: ``(B, units)`` raw outputs (logits for the
    cross-entropy losses). ``lengths`` (B,), each in ``1..time``, gives the valid steps of padded
    sequences to lstm/gru layers; the other layers ignore it."""

    def __init__(self, spec: NetworkSpec) -> None:
        super().__init__()
        self.spec = spec
        incoming = [spec.input_shape, *spec.shapes[:-1]]
        self.layers = nn.ModuleList(
            _layer_module(layer, shape) for layer, shape in zip(spec.layers, incoming, strict=True)
        )
        # a network that starts with lstm/gru takes sequences of any length; input_shape[0] is nominal
        self.any_length = isinstance(spec.layers[0], RecurrentSpec)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        shape = self.spec.input_shape
        if self.any_length and x.dim() == 3 and x.shape[2] == shape[-1]:
            pass
        elif tuple(x.shape[1:]) != shape:
            if x.dim() == 2 and x.shape[1] == math.prod(shape):
                x = x.reshape(x.shape[0], *shape)
            else:
                raise ValueError(f"expected input of shape (batch, {', '.join(map(str, shape))}), got {tuple(x.shape)}")
        for layer in self.layers:
            x = layer(x, lengths) if isinstance(layer, _Recurrent) else layer(x)
        return x


def _fan_in(weight: torch.Tensor) -> int:
    return weight.shape[1] * math.prod(weight.shape[2:])


def _initializer(name: str, generator: torch.Generator) -> Callable[[torch.Tensor], object]:
    if name == "xavier_uniform":
        return lambda w: nn.init.xavier_uniform_(w, generator=generator)
    if name == "xavier_normal":
        return lambda w: nn.init.xavier_normal_(w, generator=generator)
    if name == "kaiming_uniform":
        return lambda w: nn.init.kaiming_uniform_(w, nonlinearity="relu", generator=generator)
    if name == "kaiming_normal":
        return lambda w: nn.init.kaiming_normal_(w, nonlinearity="relu", generator=generator)
    if name == "normal":
        return lambda w: nn.init.normal_(w, 0.0, 1.0 / math.sqrt(_fan_in(w)), generator=generator)
    if name == "uniform":
        return lambda w: nn.init.uniform_(
            w, -1.0 / math.sqrt(_fan_in(w)), 1.0 / math.sqrt(_fan_in(w)), generator=generator
        )
    if name == "zeros":
        return nn.init.zeros_
    raise ValueError(f"unknown weight_init {name!r}")


def build_network(spec: NetworkSpec, *, seed: int) -> Network:
    """A freshly initialised CPU module; deterministic in (spec, seed), leaves the global RNG untouched."""
    with torch.device("meta"):
        module = Network(spec)
    module.to_empty(device="cpu")
    generator = torch.Generator(device="cpu").manual_seed(seed)
    init_weight = _initializer(spec.weight_init, generator)
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, nn.BatchNorm1d | nn.BatchNorm2d):
                sub.reset_parameters()
                continue
            for name, param in sub.named_parameters(recurse=False):
                if name.startswith("weight"):
                    init_weight(param)
                else:
                    nn.init.zeros_(param)
    return module


def flat_parameters(module: nn.Module) -> list[torch.Tensor]:
    """The parameters in ``module.parameters()`` order: layer by layer, weight before bias, and for
    lstm/gru ``weight_ih, weight_hh, bias_ih, bias_hh``. Buffers (batch-norm statistics) excluded."""
    return list(module.parameters())


def _broadcast_to(t: torch.Tensor, like: torch.Tensor, what: str) -> torch.Tensor:
    if t.shape == like.shape:
        return t
    if t.numel() == like.shape[0] and t.shape[0] == like.shape[0]:
        return t.reshape(-1, *([1] * (like.dim() - 1))).expand_as(like)
    raise ValueError(f"{what} of shape {tuple(t.shape)} does not fit outputs of shape {tuple(like.shape)}")


class Loss:
    """``loss(outputs, targets, mask=None, weight=None)``: the (weighted) mean over unmasked elements.

    ``mask``/``weight`` are per row ``(B,)`` or per element ``(B, units)``. Masked targets may hold
    anything (padding, NaN): they are replaced before the loss is computed so they cannot poison the
    gradient. With everything masked the loss is 0.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __call__(
        self,
        outputs: torch.Tensor,
        targets: torch.Tensor,
        mask: torch.Tensor | None = None,
        weight: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if self.kind == "cross_entropy":
            if targets.is_floating_point():
                raise TypeError("cross_entropy targets must be integer class indices (int64)")
            targets = targets.reshape(outputs.shape[0]).long()
            like = outputs[:, 0]
        else:
            if targets.numel() != outputs.numel():
                raise ValueError(f"targets of shape {tuple(targets.shape)} do not fit outputs {tuple(outputs.shape)}")
            targets = targets.reshape(outputs.shape).to(outputs.dtype)
            like = outputs
        keep = None
        if mask is not None:
            keep = _broadcast_to(mask, like, "mask") != 0
            targets = torch.where(keep, targets, torch.zeros_like(targets))
        elementwise = self._elementwise(outputs, targets)
        if keep is None and weight is None:
            return elementwise.mean()
        scale = torch.ones_like(elementwise)
        if keep is not None:
            scale = scale * keep.to(elementwise.dtype)
        if weight is not None:
            scale = scale * _broadcast_to(weight.to(elementwise.dtype), elementwise, "weight")
        return (elementwise * scale).sum() / scale.sum().clamp_min(torch.finfo(scale.dtype).tiny)

    def _elementwise(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.kind == "cross_entropy":
            return functional.cross_entropy(outputs, targets, reduction="none")
        if self.kind == "binary_cross_entropy":
            return functional.binary_cross_entropy_with_logits(outputs, targets, reduction="none")
        if self.kind == "mse":
            return (outputs - targets).square()
        if self.kind == "mae":
            return (outputs - targets).abs()
        raise ValueError(f"unknown loss {self.kind!r}")

    def __repr__(self) -> str:
        return f"Loss({self.kind!r})"


def make_loss(spec: NetworkSpec) -> Loss:
    return Loss(spec.loss)


def predict_transform(spec: NetworkSpec, outputs: torch.Tensor) -> torch.Tensor:
    """Raw module outputs to predictions: class probabilities for cross_entropy, P(class 1) for
    binary_cross_entropy, the values themselves (activation already applied) for mse/mae."""
    if spec.loss == "cross_entropy":
        return torch.softmax(outputs, dim=-1)
    if spec.loss == "binary_cross_entropy":
        return torch.sigmoid(outputs)
    return outputs
