"""Run a model trained by sparktrain with nothing but torch, numpy and safetensors (no sparktrain needed).

This file ships as ``sparktrain_model.py`` in every downloaded model archive, next to ``spec.json`` (the model
card) and ``weights.safetensors`` (the weights). The archive holds one folder, ``<model name>-v<version>``::

    tar xzf model.tar.gz && cd <model name>-v<version>
    python -c "import sparktrain_model as m; model = m.load('.'); print(model.predict([[5.1, 3.5, 1.4, 0.2]]))"

or ``python sparktrain_model.py . '[[5.1, 3.5, 1.4, 0.2]]'`` (JSON rows held to sparktrain's ``/predict`` checks:
``model.check(rows)``; one line saying what is wrong, exit 1). From Python (Python >= 3.10, torch >= 2.0:
``pip install torch numpy safetensors``)::

    import sparktrain_model
    model = sparktrain_model.load("path/to/unpacked/archive")
    model.predict(rows)   # raw feature values, columns in the order of model.card["features"]
    model.raw(x)          # the network's outputs (logits for classification) for already-normalized input
    model.module          # the torch.nn.Module in eval mode: fine-tune it, torch.onnx.export it, ...

``predict(rows, lengths=None)`` takes a numpy array, tensor or nested lists: rows ``(n, features)`` or
``(n, *input_shape)`` (a single flat row is fine too), or rows of named columns (a dict per row, a list of them or
a pandas DataFrame: the card's ``features``, or for a model trained with categorical features its ``categorical``
inputs with their categories as values, encoded here as in training) or, for a network that starts with lstm/gru,
sequences ``(n, time, features)`` of any length with the valid steps first and ``lengths`` (n,) giving each one's
valid steps (a list of sequences of different lengths is padded for you). It applies the card's normalizer, runs the
network under ``torch.no_grad()`` and returns a dict of plain lists, one entry per row:

* ``cross_entropy``: ``class_index``, ``label`` (``class_labels[class_index]``, or the index itself when the
  labels were numbers) and ``probabilities`` (softmax, one column per class)
* ``binary_cross_entropy``: the same, ``probabilities`` being ``[P(class 0), P(class 1)]``; class 1 when
  P(class 1) > 0.5
* ``mse`` / ``mae`` (regression): ``prediction``, a number per row for one label column, else a list per row

After an lstm/gru with ``return_sequences`` (no flatten) every row gets one result per time step (the steps past
a sequence's length are computed on padding: ignore them).

The card, ``spec.json`` (``model.card``):

* ``network``: the architecture, the training request's JSON with every default spelled out: ``input_shape``,
  ``layers``, ``weight_init``, ``l2``
* ``input_shape``: the shape of one row of the training data
* ``features``: the feature columns, in the order ``predict`` expects them; with ``array_column`` true there is
  one array column holding all the values of a row
* ``labels``: the label column(s); ``task``: ``classification`` or ``regression``
* ``num_classes``; ``class_labels``: ``class_labels[i]`` is the label of class index ``i`` (null when the labels
  were numbers, the class index then is the label)
* ``normalizer``: null, or ``{"kind", "shift", "scale", "count"}``: the network was trained on
  ``(x - shift) / scale`` per feature position (one shift and scale for every value with kind ``image``)
* ``categorical`` (only when some inputs were categories): ``inputs`` (the request's columns), ``levels`` (each
  categorical column's categories, sorted: one 0/1 feature per category, in the order of ``features``) and
  ``types`` (how a value is read: whole numbers ``3``, ``true``/``false``, or text); a category training did not
  see encodes as all zeros

The archive is also an MLflow model directory (``MLmodel``; this file is its ``loader_module`` in ``code/``):
``mlflow.pyfunc.load_model(dir).predict(df)`` takes a DataFrame of the feature columns (a sequence model: an array
``(n, time, features)``) and answers the values, or for classification a DataFrame of ``prediction``, ``class_index``
and ``probabilities`` (pandas is imported for that only).

Safe to load: nothing is unpickled. The weights are read with safetensors (plain tensors) and the card with
json; the only code that runs is this file and torch.

This file is also sparktrain's one network builder: the trainer builds its modules here too, from the same
``network`` object, adding only its seeded initial weights (``workers.training.torch.network``). So the archive
needs this one file and cannot drift from the trainer.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

__all__ = ["LAYER_TYPES", "Model", "Network", "build_module", "load", "materialize", "predict_transform"]

SPEC = "spec.json"
WEIGHTS = "weights.safetensors"
_SHAPED = ("avg_pool2d", "batch_norm", "conv2d", "dense", "gru", "lstm", "max_pool2d", "output", "reshape")
LAYER_TYPES = tuple(sorted((*_SHAPED, "dropout", "flatten")))
_NEWER = "the model was probably made by a newer sparktrain: use the sparktrain_model.py from the same archive"

Shape = tuple[int, ...]


def _activation(name: str) -> nn.Module:
    modules: dict[str, Callable[[], nn.Module]] = {
        "relu": nn.ReLU,
        "leaky_relu": lambda: nn.LeakyReLU(0.01),
        "elu": nn.ELU,
        "gelu": nn.GELU,
        "tanh": nn.Tanh,
        "sigmoid": nn.Sigmoid,
        "softmax": lambda: nn.Softmax(dim=-1),
        "identity": nn.Identity,
    }
    if name not in modules:
        raise ValueError(f"unknown activation {name!r}; {_NEWER}")
    return modules[name]()


class _Affine(nn.Module):
    def __init__(self, linear: nn.Linear, activation: nn.Module) -> None:
        super().__init__()
        self.linear = linear
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.linear(x))


class _Conv(nn.Module):
    """``padding="same"`` is explicit zero padding; the odd pixel of an even kernel goes right/bottom."""

    def __init__(self, conv: nn.Conv2d, same: bool, activation: nn.Module) -> None:
        super().__init__()
        kh, kw = conv.kernel_size
        pads = ((kw - 1) // 2, kw // 2, (kh - 1) // 2, kh // 2) if same else (0, 0, 0, 0)
        self.pad: nn.Module = nn.ZeroPad2d(pads) if any(pads) else nn.Identity()
        self.conv = conv
        self.activation = activation

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

    def __init__(self, rnn: nn.RNNBase, return_sequences: bool) -> None:
        super().__init__()
        self.rnn = rnn
        self.return_sequences = return_sequences

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        out, _ = self.rnn(x)
        if self.return_sequences:
            return out
        if lengths is None:
            return out[:, -1]
        index = (lengths.to(device=out.device, dtype=torch.long) - 1).view(-1, 1, 1)
        return out.gather(1, index.expand(-1, 1, out.shape[2])).squeeze(1)


def _pair(value: Any) -> tuple[int, int]:
    return (int(value), int(value)) if isinstance(value, int) else (int(value[0]), int(value[1]))


def _layer(layer: dict[str, Any], incoming: Shape, where: str) -> tuple[nn.Module, Shape]:
    """The module of one layer of the spec and its output shape (batch excluded)."""
    kind = layer.get("type")
    f32 = torch.float32
    expects = {"conv2d": 3, "max_pool2d": 3, "avg_pool2d": 3, "lstm": 2, "gru": 2}
    if kind in expects and len(incoming) != expects[kind]:
        raise ValueError(f"{where}: {kind} needs a {expects[kind]}-d input, gets {incoming}")
    if kind in ("dense", "output"):
        if kind == "output" and layer["loss"] in ("cross_entropy", "binary_cross_entropy"):
            activation: nn.Module = nn.Identity()  # folded into the loss; predict applies softmax/sigmoid
        else:
            activation = _activation(layer["activation"])
        units = int(layer["units"])
        bias = bool(layer.get("bias", True)) if kind == "dense" else True  # the output layer always has a bias
        return _Affine(nn.Linear(incoming[-1], units, bias=bias, dtype=f32), activation), (*incoming[:-1], units)
    if kind in ("conv2d", "max_pool2d", "avg_pool2d"):
        kernel = _pair(layer["kernel_size"])
        stride = _pair(layer.get("stride", 1 if kind == "conv2d" else kernel))
        padding = layer.get("padding", 0) if kind == "conv2d" else 0
        same = padding == "same"
        pad = (0, 0) if same or padding == "valid" else _pair(padding)
        if same:
            size = incoming[1:]
        else:
            size = tuple((incoming[i + 1] + 2 * pad[i] - kernel[i]) // stride[i] + 1 for i in (0, 1))
        if min(size) < 1:
            raise ValueError(f"{where}: {kind} kernel {kernel} does not fit the input {incoming}")
        if kind == "max_pool2d":
            return nn.MaxPool2d(kernel, stride=stride), (incoming[0], *size)
        if kind == "avg_pool2d":
            return nn.AvgPool2d(kernel, stride=stride), (incoming[0], *size)
        filters = int(layer["filters"])
        conv = nn.Conv2d(
            incoming[0], filters, kernel, stride=stride, padding=pad, bias=bool(layer.get("bias", True)), dtype=f32
        )
        return _Conv(conv, same, _activation(layer["activation"])), (filters, *size)
    if kind == "batch_norm":
        if len(incoming) not in (1, 3):
            raise ValueError(
                f"{where}: batch_norm needs a (features,) or (channels, height, width) input, gets {incoming}"
            )
        norm = nn.BatchNorm1d if len(incoming) == 1 else nn.BatchNorm2d
        return norm(incoming[0], dtype=f32), incoming
    if kind == "dropout":
        return nn.Dropout(float(layer["rate"])), incoming
    if kind == "flatten":
        return nn.Flatten(), (math.prod(incoming),)
    if kind == "reshape":
        shape = tuple(int(d) for d in layer["shape"])
        if math.prod(shape) != math.prod(incoming):
            raise ValueError(f"{where}: cannot reshape {incoming} into {shape}")
        return _Reshape(shape), shape
    if kind in ("lstm", "gru"):
        units, return_sequences = int(layer["units"]), bool(layer.get("return_sequences", False))
        rnn = (nn.LSTM if kind == "lstm" else nn.GRU)(incoming[-1], units, batch_first=True, dtype=f32)
        return _Recurrent(rnn, return_sequences), (incoming[0], units) if return_sequences else (units,)
    raise ValueError(f"{where}: unknown layer type {kind!r} (known: {', '.join(LAYER_TYPES)}); {_NEWER}")


class Network(nn.Module):
    """``layers[i]`` implements ``network["layers"][i]``, with sparktrain's module and tensor names. Input: float32
    ``(batch, *input_shape)`` or flat rows ``(batch, prod(input_shape))``; a network starting with lstm/gru takes
    ``(batch, time, features)`` of any length. ``lengths`` (batch,) gives the valid steps of padded sequences."""

    def __init__(self, network: dict[str, Any]) -> None:
        super().__init__()
        layers = network.get("layers")
        if not isinstance(layers, list) or not layers or not all(isinstance(layer, dict) for layer in layers):
            raise ValueError("network.layers must be a non-empty list of layer objects")
        if layers[-1].get("type") != "output":
            raise ValueError(f"the last layer must be the output layer, got {layers[-1].get('type')!r}")
        self.input_shape: Shape = tuple(int(d) for d in network["input_shape"])
        modules, shape = [], self.input_shape
        for i, layer in enumerate(layers):
            module, shape = _layer(layer, shape, f"network.layers[{i}]")
            modules.append(module)
        self.layers = nn.ModuleList(modules)
        self.output_shape: Shape = shape
        self.loss: str = layers[-1]["loss"]
        self.any_length = layers[0].get("type") in ("lstm", "gru")

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        shape = self.input_shape
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


N = TypeVar("N", bound=Network)


def materialize(make: Callable[[], N], init_weight: Callable[[torch.Tensor], object] = nn.init.zeros_) -> N:
    """``make()`` on the ``meta`` device (no memory, no random draws), materialised on the CPU: ``init_weight`` on
    every weight tensor in ``module.parameters()`` order (zeros until the weights are loaded; the trainer passes its
    seeded ``weight_init``), biases zero, batch norm at identity. Torch's global RNG is left untouched."""
    with torch.device("meta"):
        module = make()
    module.to_empty(device="cpu")
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, nn.BatchNorm1d | nn.BatchNorm2d):
                sub.reset_parameters()  # scale 1, shift 0 and fresh running statistics
                continue
            for name, param in sub.named_parameters(recurse=False):
                (init_weight if name.startswith("weight") else nn.init.zeros_)(param)
    return module


def build_module(network: dict[str, Any]) -> Network:
    """The CPU module for the card's ``network`` object, without weights (zeros; batch norm at identity) until you
    ``load_state_dict(safetensors.torch.load_file("weights.safetensors"))``."""
    return materialize(lambda: Network(network))


def predict_transform(loss: str, outputs: torch.Tensor) -> torch.Tensor:
    """Raw outputs to predictions: class probabilities (softmax) for cross_entropy, P(class 1) (sigmoid) for
    binary_cross_entropy, the values themselves (the output activation already applied) for mse/mae."""
    if loss == "cross_entropy":
        return torch.softmax(outputs, dim=-1)
    if loss == "binary_cross_entropy":
        return torch.sigmoid(outputs)
    return outputs


def _check_weights(module: nn.Module, tensors: dict[str, torch.Tensor], path: Path) -> None:
    own = module.state_dict()
    problems = [f"missing {name}" for name in own if name not in tensors]
    problems += [f"unexpected {name}" for name in tensors if name not in own]
    problems += [
        f"{name} has shape {tuple(tensors[name].shape)}, the network needs {tuple(t.shape)}"
        for name, t in own.items()
        if name in tensors and tensors[name].shape != t.shape
    ]
    if problems:
        more = f" (and {len(problems) - 8} more)" if len(problems) > 8 else ""
        raise ValueError(f"{path} does not fit the network in {SPEC}: {'; '.join(problems[:8])}{more}")


class Model:
    """A loaded model: ``module`` (eval mode), ``card`` (spec.json), ``predict`` and ``raw``."""

    def __init__(self, module: Network, card: dict[str, Any]) -> None:
        self.module = module.eval()
        self.card = card
        self.loss = module.loss
        labels = card.get("class_labels")
        self.class_labels: list[Any] | None = list(labels) if labels else None
        norm = card.get("normalizer")
        self.shift = np.asarray(norm["shift"], dtype=np.float32) if norm else None
        self.scale = np.asarray(norm["scale"], dtype=np.float32) if norm else None

    def __repr__(self) -> str:
        card, shape = self.card, list(self.module.input_shape)
        return (
            f"Model(task={card.get('task')!r}, loss={self.loss!r}, input_shape={shape}, "
            f"features={card.get('features')!r}, labels={card.get('labels')!r}, classes={self.class_labels!r})"
        )

    def raw(self, x: Any, lengths: Any = None) -> torch.Tensor:
        """The module's outputs for already-normalized input (logits for the cross-entropy losses)."""
        tensor = x.detach().cpu() if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x, np.float32))
        length = None if lengths is None else torch.as_tensor(np.asarray(lengths, dtype=np.int64))
        with torch.no_grad():
            out: torch.Tensor = self.module(tensor.to(torch.float32), length)
        return out

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """``(x - shift) / scale`` in float32 per flattened feature position, as in training."""
        if self.shift is None or self.scale is None:
            return x
        flat = x.reshape(len(x), -1).astype(np.float32, copy=True)
        if self.shift.size not in (1, flat.shape[1]):
            raise ValueError(f"the normalizer was fitted on {self.shift.size} features, the rows have {flat.shape[1]}")
        flat -= self.shift
        flat /= self.scale
        return flat.reshape(x.shape)

    def records(self, rows: Any) -> np.ndarray:
        """Rows of named columns (dicts, or a DataFrame) as the features the network takes, before normalizing:
        the card's ``features`` in order, or its ``categorical`` inputs with each category one-hot encoded."""
        if hasattr(rows, "to_dict") and hasattr(rows, "columns"):  # a pandas DataFrame
            rows = rows.to_dict("records")
        rows = [rows] if isinstance(rows, Mapping) else list(rows)
        if self.module.any_length:
            raise ValueError("a sequence model takes arrays (n, time, features), not rows of named columns")
        card, spec = self.card, self.card.get("categorical") or {}
        columns = [str(c) for c in (card.get("features") or [])]
        levels: dict[str, dict[str, int]] = {}
        if spec and not (rows and all(c in rows[0] for c in columns)):  # the request's columns, not the one-hot ones
            columns = [str(c) for c in spec["inputs"]]
            levels = {c: {str(v): k for k, v in enumerate(values)} for c, values in spec["levels"].items()}
        array = bool(card.get("array_column"))  # one column holding every value of a row
        width = math.prod(self.module.input_shape) if array else sum(len(levels.get(c, ())) or 1 for c in columns)
        out = np.zeros((len(rows), width), np.float32)
        for i, row in enumerate(rows):
            if missing := [c for c in columns if c not in row]:
                raise ValueError(f"row {i} has no {', '.join(map(repr, missing))}; the model's columns are {columns}")
            if array:
                out[i] = _floats(row[columns[0]], f"row {i}: {columns[0]}", width)
                continue
            at = 0
            for column in columns:
                where, value = f"row {i}: {column}", row[column]
                if column not in levels:
                    out[i, at], at = _floats(value, where, 1)[0], at + 1
                    continue
                found = levels[column].get(_category(value, (spec.get("types") or {}).get(column, "string"), where))
                if found is not None:  # an unseen category: all zeros, as in training's encoding
                    out[i, at + found] = 1.0
                at += len(levels[column])
        return out

    def check(self, rows: Any) -> None:
        """JSON rows (the command line's) held to sparktrain's ``POST /predict`` checks, which ``predict`` skips: finite
        numbers within float32 (a boolean column's true/false/0/1, a whole-number column's whole), no null, no
        column the model lacks. A ValueError names the row and column (``predict`` reads null as NaN, "2.1" as 2.1)."""
        rows = [rows] if isinstance(rows, Mapping) else rows
        if not isinstance(rows, list) or not rows:
            return  # predict says what is wrong
        card, cats = self.card, self.card.get("categorical") or {}
        kinds = {s["name"]: s.get("type") for s in (card.get("signature") or {}).get("inputs") or [] if "name" in s}
        features = [str(f) for f in card.get("features") or []]
        if not any(isinstance(r, list | Mapping) for r in rows):  # one flat row, or a one-feature model's values
            rows = [[v] for v in rows] if math.prod(self.module.input_shape) == 1 else [rows]
        for i, row in enumerate(rows):
            if isinstance(row, Mapping):
                named = features if not cats or all(c in row for c in features) else [str(c) for c in cats["inputs"]]
                if extra := [str(c) for c in row if c not in named]:
                    raise ValueError(f"row {i}: unexpected columns {extra}; the model's columns are {named}")
                items = [(c, row[c]) for c in named if c in row and c not in cats.get("levels", {})]
            elif isinstance(row, list) and len(row) == len(features) and not self.module.any_length:
                items = list(zip(features, row, strict=True))
            else:  # an array column's values, or a sequence's steps
                items = [(features[0] if card.get("array_column") else "value", row)]
            for column, value in items:
                for k, leaf in enumerate(_flat(value)):
                    name = f"{column}[{k}]" if isinstance(value, list) else column
                    _check_value(leaf, str(kinds.get(column, "double")), f"row {i}: column {name!r}")

    def _rows(self, rows: Any, lengths: Any) -> tuple[np.ndarray, np.ndarray | None]:
        if isinstance(rows, torch.Tensor):
            rows = rows.detach().cpu().numpy()
        named = isinstance(rows, Mapping) or (hasattr(rows, "to_dict") and hasattr(rows, "columns"))
        if named or (isinstance(rows, list | tuple) and rows and isinstance(rows[0], Mapping)):
            rows = self.records(rows)
        try:
            x = np.asarray(rows, dtype=np.float32)
        except ValueError:  # rows of different lengths: sequences to pad
            if not self.module.any_length:
                raise ValueError("the rows have different numbers of values") from None
            sequences = [np.asarray(s, dtype=np.float32) for s in rows]
            if any(s.ndim != 2 or s.shape[1] != self.module.input_shape[-1] for s in sequences):
                raise ValueError(f"each sequence must be (time, {self.module.input_shape[-1]})") from None
            x = np.zeros((len(sequences), max(len(s) for s in sequences), sequences[0].shape[1]), np.float32)
            for i, s in enumerate(sequences):
                x[i, : len(s)] = s
            lengths = [len(s) for s in sequences] if lengths is None else lengths
        if x.ndim == 0:
            raise ValueError(f"rows must be a list of rows (or one row), not a single value: {rows!r}"[:200])
        if x.ndim == 1:  # one flat row, or one value per row for a one-feature network (or no rows)
            width = math.prod(self.module.input_shape)
            x = x.reshape(-1, width) if width == 1 or x.size == 0 else x.reshape(1, -1)
        if lengths is None:
            return x, None
        steps = np.asarray(lengths, dtype=np.int64).reshape(-1)
        if x.ndim != 3 or len(steps) != len(x) or (len(steps) and (steps.min() < 1 or steps.max() > x.shape[1])):
            raise ValueError(f"lengths must give 1..time steps for each of the {len(x)} sequences (n, time, features)")
        return x, steps

    def predict(self, rows: Any, lengths: Any = None, batch_size: int = 1024) -> dict[str, list[Any]]:
        """Predictions for raw (not normalized) rows; see the module docstring for the input and the result."""
        x, steps = self._rows(rows, lengths)
        x = self.normalize(x) if len(x) else x
        parts = []
        for start in range(0, len(x), batch_size):
            part = None if steps is None else steps[start : start + batch_size]
            parts.append(self.raw(np.ascontiguousarray(x[start : start + batch_size]), part))
        out = torch.cat(parts) if parts else torch.zeros((0, *self.module.output_shape))
        if self.loss not in ("cross_entropy", "binary_cross_entropy"):
            values = out[:, 0] if out.dim() == 2 and out.shape[1] == 1 else out
            return {"prediction": values.tolist()}
        probabilities = predict_transform(self.loss, out).double()
        if self.loss == "binary_cross_entropy":
            probabilities = torch.cat([1 - probabilities, probabilities], dim=-1)
        index = probabilities.argmax(dim=-1).numpy()
        labels = np.asarray(self.class_labels, dtype=object)[index].tolist() if self.class_labels else index.tolist()
        return {"class_index": index.tolist(), "label": labels, "probabilities": probabilities.tolist()}


def _floats(value: Any, where: str, size: int) -> np.ndarray:
    """A numeric input's value(s): numbers (booleans as 1 and 0, text that is a number), ``size`` of them."""
    try:
        out = np.asarray(value, dtype=np.float32).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {value!r} is not a number") from None
    if out.size != size:
        raise ValueError(f"{where}: {out.size} values, the model takes {size}")
    return out


def _flat(value: Any) -> list[Any]:
    return [leaf for v in value for leaf in _flat(v)] if isinstance(value, list | tuple) else [value]


def _check_value(value: Any, kind: str, where: str) -> None:
    """One JSON value against its column's type (``double``, ``long``, ``boolean``), in /predict's words."""
    shown, number = json.dumps(value)[:40], isinstance(value, int | float) and not isinstance(value, bool)
    whole = kind in ("long", "integer")
    if value is None or (number and not abs(value) <= 3.4028234663852886e38):  # NaN compares false
        raise ValueError(f"{where} is {shown}: a feature is NaN, infinite, missing or beyond float32")
    if kind == "boolean" and not (isinstance(value, bool) or (number and value in (0, 1))):
        raise ValueError(f"{where} takes booleans: {shown} is not a boolean")
    if kind != "boolean" and not number:
        raise ValueError(f"{where} takes {'whole numbers' if whole else 'numbers'}: {shown} is not a number")
    if whole and not float(value).is_integer():
        raise ValueError(f"{where} takes whole numbers: {shown} is not a whole number")


def _category(value: Any, kind: str, where: str) -> str:
    """A categorical value as the text of its category, read as a column of Spark type ``kind`` was in training
    (the twin of sparktrain's ``workers.data.categories.level_of``; a test holds the two to the same answers)."""
    if value is None or (isinstance(value, float | np.floating) and math.isnan(value)):
        raise ValueError(f"{where} is null; a categorical feature needs a category")
    boolean, number = isinstance(value, bool | np.bool_), isinstance(value, int | float | np.integer | np.floating)
    if kind in ("tinyint", "smallint", "int", "bigint"):
        text = value if isinstance(value, str) else ""
        whole = bool(re.fullmatch(r"[ \t\r\n]*[+-]?[0-9]+[ \t\r\n]*", text)) or (number and float(value).is_integer())
        if boolean or not whole:
            raise ValueError(f"{where}: {value!r} is not a whole number; the column's categories are whole numbers")
        whole_number = int(text) if text else int(value) if isinstance(value, int | np.integer) else int(float(value))
        half = 2 ** ({"tinyint": 8, "smallint": 16, "int": 32}.get(kind, 64) - 1)
        if not -half <= whole_number < half:
            raise ValueError(f"{where}: {value!r} is outside the {kind} range of the column's categories")
        return str(whole_number)
    if kind == "boolean":
        text = ("true" if value else "false") if boolean else str(value).strip().lower()
        if number and not boolean and value in (0, 1):
            text = "true" if value == 1 else "false"
        if text not in ("t", "true", "y", "yes", "1", "f", "false", "n", "no", "0"):
            raise ValueError(f"{where}: {value!r} is not a boolean; the column's categories are true and false")
        return "true" if text in ("t", "true", "y", "yes", "1") else "false"
    if boolean:
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    return repr(float(value)) if isinstance(value, float | np.floating) else str(value)


def load(directory: str | Path = ".") -> Model:
    """The model in ``directory`` (``spec.json`` + ``weights.safetensors``), ready to ``predict``."""
    base = Path(directory)
    if not base.is_dir():
        raise FileNotFoundError(f"{base} is not a directory; unpack the model archive and pass its directory")
    missing = [name for name in (SPEC, WEIGHTS) if not (base / name).is_file()]
    if missing:
        nested = sorted(str(p.parent) for p in base.glob(f"*/{SPEC}"))
        hint = f"; found one in {nested[0]}" if nested else ""
        raise FileNotFoundError(
            f"{base} has no {' and no '.join(missing)}: it is not a sparktrain model directory{hint}"
        )
    card = json.loads((base / SPEC).read_text(encoding="utf-8"))
    if not isinstance(card, dict) or not isinstance(card.get("network"), dict):
        raise ValueError(f"{base / SPEC} has no 'network' object: not a sparktrain model card")
    module = build_module(card["network"])
    tensors = load_file(str(base / WEIGHTS))
    _check_weights(module, tensors, base / WEIGHTS)
    module.load_state_dict(tensors, strict=True)
    return Model(module, card)


class _PyFunc:
    """MLflow's ``python_function`` interface over a :class:`Model` (what :func:`_load_pyfunc` returns)."""

    def __init__(self, model: Model) -> None:
        self.model = model

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> Any:
        import pandas as pd

        card, module = self.model.card, self.model.module
        rows: Any = model_input
        if isinstance(model_input, pd.DataFrame):
            features = list(card.get("features") or [])
            if module.any_length:  # one sequence per row: each feature column holds the per-step values
                rows = [[list(step) for step in zip(*(r[f] for f in features), strict=True)]
                        for r in model_input.to_dict("records")]  # fmt: skip
            elif not set(features) <= set(model_input.columns):  # the request's columns: encoded by the loader
                rows = model_input
            elif card.get("array_column"):
                rows = np.stack([np.asarray(v, np.float32).reshape(-1) for v in model_input[features[0]]])
            else:
                rows = model_input[features].to_numpy(np.float32)
        out = self.model.predict(rows)
        if "prediction" not in out:
            return pd.DataFrame({"prediction": out["label"], "class_index": out["class_index"],
                                 "probabilities": out["probabilities"]})  # fmt: skip
        values, labels = np.asarray(out["prediction"], np.float64), list(card.get("labels") or [])
        if values.ndim == 2 and not module.any_length and len(labels) == values.shape[1]:
            return pd.DataFrame(values, columns=labels)
        return values


def _load_pyfunc(path: str) -> _PyFunc:
    """MLflow calls this with the flavor's ``data`` path (``weights.safetensors``); ``spec.json`` lies next to it."""
    base = Path(path)
    return _PyFunc(load(base.parent if base.is_file() else base))


if __name__ == "__main__":  # python sparktrain_model.py [DIR] ['[[...rows as JSON...]]' or '[{"column": ...}]']
    try:
        _model = load(sys.argv[1] if len(sys.argv) > 1 else ".")
        try:
            _rows = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
        except json.JSONDecodeError as _exc:
            sys.exit(f"sparktrain_model.py: the rows are not JSON ({_exc}); give a JSON list of rows: "
                     "'[[1.0, 2.0]]', or of objects by column: '[{\"trip_distance\": 2.5}]'")  # fmt: skip
        _model.check(_rows)  # JSON rows held to /predict's checks (None: nothing to check)
        _out = _model.predict(_rows) if len(sys.argv) > 2 else None
        try:
            print(_model if _out is None else json.dumps(_out, allow_nan=False))
        except ValueError:
            sys.exit("sparktrain_model.py: the model answered NaN or infinity for these rows: no JSON for them")
    except (OSError, ValueError) as _exc:
        sys.exit(f"sparktrain_model.py: {_exc}")
