"""ONNX export of torch networks (``workers.inference.onnx_export``) against torch itself, under onnxruntime:
dense, conv, pooling, batch-norm, dropout (eval), LSTM and GRU networks agree to 1e-5, with the normalizer and the
output transform in the graph, any batch size and any sequence length; a layer that cannot be exported is named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from workers.inference import onnx_export, standalone
from workers.training.torch.checkpoint import save_model

pytestmark = pytest.mark.slow  # a torch.onnx.export takes seconds
ort = pytest.importorskip("onnxruntime")


def _dense(units: int, activation: str = "relu") -> dict[str, Any]:
    return {"type": "dense", "units": units, "activation": activation}


NETWORKS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "dense-batchnorm-dropout": (
        {"input_shape": [6], "layers": [_dense(8, "elu"), {"type": "batch_norm"}, {"type": "dropout", "rate": 0.5},
                                        _dense(5, "gelu"),
                                        {"type": "output", "units": 1, "activation": "sigmoid",
                                         "loss": "binary_cross_entropy"}]},
        {"task": "classification", "class_labels": ["no", "yes"],
         "normalizer": {"kind": "standardize", "shift": [1.0, -2.0, 0.5, 0.0, 3.0, 1.0],
                        "scale": [2.0, 0.5, 1.0, 4.0, 1.0, 3.0], "count": 10}},
    ),
    "conv-pooling-batchnorm": (
        {"input_shape": [1, 8, 8], "layers": [
            {"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same", "activation": "relu"},
            {"type": "batch_norm"}, {"type": "max_pool2d", "kernel_size": 2},
            {"type": "conv2d", "filters": 3, "kernel_size": 2, "activation": "tanh"},
            {"type": "avg_pool2d", "kernel_size": 2, "stride": 1}, {"type": "flatten"},
            {"type": "dropout", "rate": 0.3},
            {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}]},
        {"task": "classification", "normalizer": {"kind": "image", "shift": [0.0], "scale": [16.0], "count": 5}},
    ),
    "lstm-last-step": (
        {"input_shape": [5, 3], "layers": [{"type": "lstm", "units": 6, "return_sequences": True},
                                           {"type": "lstm", "units": 4},
                                           {"type": "output", "units": 3, "activation": "softmax",
                                            "loss": "cross_entropy"}]},
        {"task": "classification"},
    ),
    "gru-per-step": (
        {"input_shape": [5, 2], "layers": [{"type": "gru", "units": 4, "return_sequences": True},
                                           {"type": "output", "units": 2, "activation": "identity", "loss": "mse"}]},
        {"task": "regression"},
    ),
    "gru-per-step-classes": (
        {"input_shape": [4, 2], "layers": [{"type": "gru", "units": 4, "return_sequences": True},
                                           {"type": "output", "units": 3, "activation": "softmax",
                                            "loss": "cross_entropy"}]},
        {"task": "classification"},
    ),
}  # fmt: skip


def _model_dir(tmp_path: Path, network: dict[str, Any], card: dict[str, Any]) -> Path:
    module = standalone.build_module(network)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for tensor in module.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(torch.rand(tensor.shape, generator=generator) * 0.8 + 0.1)  # running var > 0 too
    directory = tmp_path / "model"
    save_model(directory, module, {"network": network, "features": ["x"], "labels": ["y"], **card})
    return directory


def _reference(model: standalone.Model, x: np.ndarray, mask: np.ndarray | None) -> dict[str, np.ndarray]:
    """What /predict computes (sparktrain_model's normalizer, network and transform), in torch."""
    lengths = mask.sum(axis=1).astype(np.int64) if mask is not None else None
    raw = model.raw(model.normalize(x), lengths)
    out = standalone.predict_transform(model.loss, raw).double().numpy()
    if model.loss == "binary_cross_entropy":
        out = np.concatenate([1 - out, out], axis=-1)
    return {"probabilities": out, "class_index": out.argmax(-1)} if model.card["task"] == "classification" \
        else {"prediction": out}  # fmt: skip


@pytest.mark.parametrize("name", list(NETWORKS))
def test_onnx_agrees_with_torch(tmp_path: Path, name: str) -> None:
    network, card = NETWORKS[name]
    directory = _model_dir(tmp_path, network, card)
    out = tmp_path / "onnx"
    out.mkdir()
    onnx_export.export(directory, out)
    sidecar = json.loads((out / onnx_export.SIDECAR).read_text())
    session = ort.InferenceSession(str(out / onnx_export.MODEL_FILE))
    per_step = "per-step" in name  # every output has the step axis second, class_index [batch, steps] too
    for declared in session.get_outputs():  # fixed to the example's 4 steps, onnxruntime warned on every other length
        assert declared.shape[0] == "batch" and (declared.shape[1:2] == ["steps"]) == per_step, (name, declared)
    model = standalone.load(directory)
    rng = np.random.default_rng(5)
    sequence = network["layers"][0]["type"] in ("lstm", "gru")
    for batch, steps in ((1, 3), (7, 9)):  # neither is the export's example size
        if sequence:
            x = rng.normal(size=(batch, steps, network["input_shape"][-1])).astype(np.float32)
            mask = np.ones((batch, steps), np.float32)
            mask[0, steps - 1 :] = 0  # the first sequence is one step shorter
        else:
            x = rng.normal(3, 4, size=(batch, int(np.prod(network["input_shape"])))).astype(np.float32)
            mask = None
        feeds = {"input": x, **({"mask": mask} if "mask" in [i.name for i in session.get_inputs()] else {})}
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
        want = _reference(model, x, mask if "mask" in feeds else None)
        assert set(got) == set(want) == {o["name"] for o in sidecar["outputs"]}
        for key, value in want.items():
            np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-6, err_msg=f"{name} {key}")
    assert [i["name"] for i in sidecar["inputs"]] == [i.name for i in session.get_inputs()]
    assert sidecar["exporter"] in ("dynamo", "torchscript")  # torchscript where dynamo fixed the step count
    assert ("mask" in sidecar["inputs"][-1]["name"]) == (name == "lstm-last-step")
    if card.get("normalizer"):
        assert sidecar["normalizer"] == {**card["normalizer"], "in_graph": True}


class _Eigen(torch.nn.Module):
    """An op ONNX has no counterpart for (eigenvalues)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.eigvals(x.reshape(x.shape[0], 2, 2)).real


def test_a_layer_that_cannot_be_exported_is_named(tmp_path: Path) -> None:
    output = {"type": "output", "units": 2, "activation": "identity", "loss": "mse"}
    network = {"input_shape": [4], "layers": [_dense(4), _dense(4), output]}
    model = standalone.load(_model_dir(tmp_path, network, {"task": "regression"}))
    model.module.layers[1] = torch.nn.Sequential(_Eigen(), torch.nn.Linear(2, 4))
    graph = onnx_export._Graph(model).eval()
    example = onnx_export._example(model)
    with pytest.raises(Exception) as whole:
        onnx_export._export(graph, example, ["input"], ["prediction"], tmp_path / "x.onnx")
    error = onnx_export._culprit(model, example, whole.value)
    assert error.layer == "network.layers[1] (dense)" and "Error" in error.message
