"""A torch model directory as ONNX: ``model.onnx`` (``torch.onnx.export``, opset 18, a dynamic batch axis) and a
JSON sidecar, ``sparktrain_onnx.json`` (inputs, outputs, feature order, normalizer, class labels).

The graph takes raw feature values and answers what ``POST /predict`` answers, so Triton, onnxruntime or an edge
runtime need nothing else:

* ``input``: float32 ``[batch, width]``, the features in the card's order (an array column flattened); a sequence
  model takes ``[batch, steps, features]`` with a dynamic step axis, plus ``mask`` float32 ``[batch, steps]`` (1
  for a real step, real steps first) when a recurrent layer answers one value per sequence;
* the stored normalizer is applied inside the graph (the sidecar repeats it, marked ``"in_graph": true``);
* outputs: ``probabilities`` ``[batch, classes]`` and ``class_index`` (int64) for classification (a binary model
  gives ``[P(class 0), P(class 1)]``), ``prediction`` ``[batch, units]`` for regression; per-step models add the
  step axis after the batch.

An export is checked before it is kept: ``onnx.checker`` and onnx's reference evaluator on a few rows must agree
with torch. A network that cannot be exported is an :class:`ExportError` naming the layer at fault, never a file.

Run as ``python -m workers.inference.onnx_export MODEL_DIR OUT_DIR`` (the API exports in such a subprocess):
exit 0, or exit 3 with the error as JSON on stdout.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from workers.inference import standalone

OPSET = 18
MODEL_FILE = "model.onnx"
SIDECAR = "sparktrain_onnx.json"
EXPORT_ERROR_EXIT = 3
TOLERANCE = 1e-4


class ExportError(ValueError):
    """The network cannot be expressed in ONNX; ``layer`` names the layer at fault (``network.layers[2] (lstm)``)."""

    def __init__(self, layer: str, message: str) -> None:
        super().__init__(f"{layer}: {message}")
        self.layer = layer
        self.message = message


class _Graph(nn.Module):
    """Raw features in, predictions out: normalizer, network, softmax/sigmoid (the /predict path, in one graph)."""

    def __init__(self, model: standalone.Model) -> None:
        super().__init__()
        self.net = model.module
        self.loss = model.loss
        self.sequence = model.module.any_length
        shift = model.shift if model.shift is not None else np.zeros(1, np.float32)
        scale = model.scale if model.scale is not None else np.ones(1, np.float32)
        self.shift = nn.Buffer(torch.from_numpy(np.asarray(shift, np.float32)))
        self.scale = nn.Buffer(torch.from_numpy(np.asarray(scale, np.float32)))
        self.normalized = model.shift is not None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        if self.normalized:
            x = (x - self.shift) / self.scale
        lengths = mask.sum(dim=1).to(torch.long) if mask is not None else None
        out = standalone.predict_transform(self.loss, self.net(x, lengths))
        if self.loss == "binary_cross_entropy":
            out = torch.cat([1 - out, out], dim=-1)
        if self.loss in ("cross_entropy", "binary_cross_entropy"):
            return out, out.argmax(dim=-1)
        return (out,)


def needs_mask(module: standalone.Network) -> bool:
    """Whether a recurrent layer picks the last real step of each sequence (then padding must be known)."""
    return any(isinstance(layer, standalone._Recurrent) and not layer.return_sequences for layer in module.layers)


def _example(model: standalone.Model, rows: int = 3, steps: int = 4) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    shape = model.module.input_shape
    if model.module.any_length:
        x = torch.randn(rows, steps, shape[-1], generator=generator)
        if not needs_mask(model.module):
            return (x,)
        mask = torch.ones(rows, steps)
        mask[0, steps - 1 :] = 0  # one padded sequence, so the graph keeps its dependence on the mask
        return x, mask
    x = torch.randn(rows, math.prod(shape), generator=generator)
    if model.shift is not None and model.scale is not None:
        x = x * torch.from_numpy(model.scale) + torch.from_numpy(model.shift)
    return (x,)


def _names(model: standalone.Model, example: tuple[torch.Tensor, ...]) -> tuple[list[str], list[str]]:
    inputs = ["input", "mask"][: len(example)]
    classify = model.loss in ("cross_entropy", "binary_cross_entropy")
    return inputs, ["probabilities", "class_index"] if classify else ["prediction"]


def _export(graph: nn.Module, example: tuple[torch.Tensor, ...], inputs: list[str], outputs: list[str],
            path: Path, dynamo: bool = True) -> None:  # fmt: skip
    """torch's exporter (``dynamo``), or its TorchScript exporter, which keeps the step axis of stacked recurrent
    layers dynamic where the first one (torch 2.13) fixes it to the example's."""
    sequence = example[0].dim() == 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            batch, steps = torch.export.Dim("batch"), torch.export.Dim("steps")
            axis = {0: batch, 1: steps} if sequence else {0: batch}
            dynamic = {name: axis for name in ["x", "mask"][: len(example)]}
            torch.onnx.export(graph, example, str(path), dynamo=True, opset_version=OPSET, input_names=inputs,
                              output_names=outputs, dynamic_shapes=dynamic, external_data=False,
                              verbose=False)  # fmt: skip
        else:
            axes = {name: {0: "batch", 1: "steps"} if sequence else {0: "batch"} for name in inputs}
            axes.update({name: {0: "batch"} for name in outputs})
            torch.onnx.export(graph, example, str(path), dynamo=False, opset_version=OPSET, input_names=inputs,
                              output_names=outputs, dynamic_axes=axes, verbose=False)  # fmt: skip
    _name_axes(path, sequence)


def _name_axes(path: Path, sequence: bool) -> None:
    """Declare the outputs' batch (and step) axes as dynamic: the exporter may fix a per-step output's step count
    to the example's (the values are right for any length; the declared shape would not be). A per-step model's
    first output (``probabilities`` or ``prediction``) is ``[batch, steps, units]``; each of its outputs has the
    step axis second, ``class_index`` ``[batch, steps]`` too (it kept the example's 4 steps, and onnxruntime
    warned on every run of another length)."""
    import onnx

    proto = onnx.load(str(path))
    outputs = proto.graph.output
    per_step = sequence and len(outputs) > 0 and len(outputs[0].type.tensor_type.shape.dim) == 3
    if sequence:
        del proto.graph.value_info[:]  # intermediate shapes, optional, that may carry the example's step count
    # the inputs too: after other exports in the process, dynamo fixed a sequence input's steps when the example's
    # (4) was the trained input_shape's; the reference check then runs the graph on other lengths
    axes = [(value, ["batch", "steps"] if sequence else ["batch"]) for value in proto.graph.input
            if value.name in ("input", "mask")]  # fmt: skip
    axes += [(value, ["batch", "steps"] if per_step else ["batch"]) for value in outputs]
    for value, names in axes:
        dims = value.type.tensor_type.shape.dim
        for axis, name in enumerate(names):
            if len(dims) > axis:
                dims[axis].ClearField("dim_value")
                dims[axis].dim_param = name
    onnx.save(proto, str(path))


def _check(path: Path, graph: nn.Module, examples: list[tuple[torch.Tensor, ...]], inputs: list[str]) -> None:
    """The file is valid ONNX and, run by onnx's reference evaluator, answers what torch answers, also for a
    batch size and a sequence length that are not the export's example's."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    onnx.checker.check_model(str(path), full_check=True)
    session = ReferenceEvaluator(str(path))
    for example in examples:
        got = session.run(None, {name: t.numpy() for name, t in zip(inputs, example, strict=True)})
        with torch.no_grad():
            want = [t.numpy() for t in graph(*example)]
        for g, w in zip(got, want, strict=True):
            if g.shape != w.shape or not np.allclose(g, w, rtol=TOLERANCE, atol=TOLERANCE):
                raise ValueError("the exported graph does not reproduce the network's outputs")


def _culprit(model: standalone.Model, example: tuple[torch.Tensor, ...], error: Exception) -> ExportError:
    """The first layer that cannot be exported on its own (fed what it gets in the whole network)."""
    seen: list[tuple[int, nn.Module, tuple[Any, ...]]] = []
    hooks = [layer.register_forward_hook(lambda m, args, out, i=i: seen.append((i, m, args)))
             for i, layer in enumerate(model.module.layers)]  # fmt: skip
    try:
        with torch.no_grad():
            _Graph(model)(*example)
    finally:
        for hook in hooks:
            hook.remove()
    kinds = [layer.get("type") for layer in model.card["network"]["layers"]]
    for i, module, args in seen:
        tensors = tuple(a for a in args if isinstance(a, torch.Tensor))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(module, tensors, dynamo=True, opset_version=OPSET, verbose=False)
        except Exception as exc:
            return ExportError(f"network.layers[{i}] ({kinds[i]})", _reason(exc))
    return ExportError("network", _reason(error))


def _reason(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


def sidecar(model: standalone.Model, inputs: list[str], outputs: list[str]) -> dict[str, Any]:
    card = model.card
    shape = list(model.module.input_shape)
    sequence = model.module.any_length
    specs: list[dict[str, Any]] = [{"name": "input", "dtype": "float32",
                                    "shape": [-1, -1, shape[-1]] if sequence else [-1, math.prod(shape)]}]  # fmt: skip
    if "mask" in inputs:
        meaning = "1 for a real step, 0 for padding; the real steps of a sequence come first"
        specs.append({"name": "mask", "dtype": "float32", "shape": [-1, -1], "meaning": meaning})
    lead = [-1, -1] if len(model.module.output_shape) == 2 else [-1]
    units = model.module.output_shape[-1]
    out_specs = {"probabilities": {"dtype": "float32", "shape": [*lead, 2 if units == 1 else units]},
                 "class_index": {"dtype": "int64", "shape": lead},
                 "prediction": {"dtype": "float32", "shape": [*lead, units]}}  # fmt: skip
    return {
        "format": "onnx",
        "opset": OPSET,
        "inputs": specs,
        "outputs": [{"name": name, **out_specs[name]} for name in outputs],
        "features": card.get("features"),
        "input_shape": shape,
        "task": card.get("task"),
        "labels": card.get("labels"),
        "class_labels": card.get("class_labels"),
        "normalizer": {**card["normalizer"], "in_graph": True} if card.get("normalizer") else None,
        "network": card.get("network"),
        # a model trained with categorical features: its inputs and how they became the one-hot features above
        "categorical": card.get("categorical"),
    }


def export(model_dir: Path, out_dir: Path) -> None:
    """Write ``model.onnx`` and the sidecar into ``out_dir`` (which must exist), or raise :class:`ExportError`."""
    model = standalone.load(model_dir)
    graph = _Graph(model).eval()
    example = _example(model)
    inputs, outputs = _names(model, example)
    path = out_dir / MODEL_FILE
    failure: Exception | None = None
    for exporter in ("dynamo", "torchscript"):
        try:
            _export(graph, example, inputs, outputs, path, dynamo=exporter == "dynamo")
            _check(path, graph, [example, _example(model, rows=2, steps=7)], inputs)
            break
        except Exception as exc:
            path.unlink(missing_ok=True)
            failure = failure or exc
    else:
        assert failure is not None
        raise _culprit(model, example, failure) from failure
    (out_dir / SIDECAR).write_text(json.dumps({**sidecar(model, inputs, outputs), "exporter": exporter}, indent=1))


def main(argv: list[str]) -> int:
    import contextlib
    import io

    if len(argv) != 2:
        print("usage: python -m workers.inference.onnx_export MODEL_DIR OUT_DIR", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the exporter's progress lines
            export(Path(argv[0]), Path(argv[1]))
    except ExportError as exc:
        print(json.dumps({"layer": exc.layer, "message": exc.message}))
        return EXPORT_ERROR_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
