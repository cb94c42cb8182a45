"""The trainer's network: the module from a parsed ``NetworkSpec``, its seeded initial weights and its loss.

The module itself is built by :mod:`workers.inference.standalone`, the file that ships as ``sparktrain_model.py``
in every model archive, from ``spec_to_dict(spec)``: the spec with every default spelled out, which is exactly the
card's ``network``. So there is one builder (layers, activations, shapes, sequence lengths, ``predict_transform``),
and an archive loads without sparktrain into the very module the trainer trained. It lives in the shipped file, not
here, because that file must stand alone (stdlib, torch, numpy, safetensors) and stay one file; this module keeps
what only training needs: the parsed spec on the module (``Network.spec``), the seeded ``weight_init``, the loss.

Initialisation is deterministic and independent of torch's global RNG: ``standalone.materialize`` creates the
module on the ``meta`` device (no memory, no random draws), materialises it on the CPU and hands every weight, in
``module.parameters()`` order, to the initializer of ``spec.weight_init``, which draws from a local
``torch.Generator(seed)``. Same spec and seed give bitwise-identical parameters on every machine with the same torch
version; the caller moves the module to its device afterwards. Biases start at zero, batch-norm at scale 1 / shift
0. ``normal`` and ``uniform`` are scaled by fan-in as in DL4J: N(0, std=1/sqrt(fan_in)) and U(-1/sqrt(fan_in),
1/sqrt(fan_in)); the kaiming variants use the relu gain.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional

from workers.inference import standalone
from workers.inference.standalone import predict_transform
from workers.training.torch.spec import NetworkSpec, spec_to_dict

__all__ = ["Loss", "Network", "build_network", "flat_parameters", "make_loss", "predict_transform"]


class Network(standalone.Network):
    """The archive's module (see :class:`workers.inference.standalone.Network`) for ``spec_to_dict(spec)``, with the
    parsed spec as ``spec``: ``layers[i]`` implements ``spec.layers[i]``."""

    def __init__(self, spec: NetworkSpec) -> None:
        super().__init__(spec_to_dict(spec))
        self.spec = spec


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
    generator = torch.Generator(device="cpu").manual_seed(seed)
    return standalone.materialize(lambda: Network(spec), _initializer(spec.weight_init, generator))


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
