"""The standalone loader shipped in model archives (``sparktrain_model.py``) against sparktrain's own network.

Every model here is built by sparktrain (``build_network``), given non-trivial weights and batch-norm statistics,
saved with sparktrain's ``save_model`` and loaded back with ``standalone.load``: the outputs must be bitwise equal.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from workers.data.normalize import Normalizer
from workers.errors import SpecError
from workers.inference import standalone
from workers.training.torch.checkpoint import save_model
from workers.training.torch.network import Network, build_network, predict_transform
from workers.training.torch.spec import ACTIVATIONS, WEIGHT_INITS, parse_network, spec_to_dict

SOURCE = Path(standalone.__file__)


def dense(units: int, activation: str = "relu", **kw: Any) -> dict[str, Any]:
    return {"type": "dense", "units": units, "activation": activation, **kw}


def output(units: int, activation: str = "identity", loss: str = "mse") -> dict[str, Any]:
    return {"type": "output", "units": units, "activation": activation, "loss": loss}


def conv(filters: int, kernel: Any, activation: str = "relu", **kw: Any) -> dict[str, Any]:
    return {"type": "conv2d", "filters": filters, "kernel_size": kernel, "activation": activation, **kw}


def net(input_shape: list[int], *layers: dict[str, Any], weight_init: str = "xavier_uniform") -> dict[str, Any]:
    return {"input_shape": input_shape, "layers": list(layers), "weight_init": weight_init}


BN, FLAT, DROP = {"type": "batch_norm"}, {"type": "flatten"}, {"type": "dropout", "rate": 0.4}

SPECS: dict[str, dict[str, Any]] = {
    "mlp": net([4], dense(8), dense(6, "tanh", bias=False), output(3, "softmax", "cross_entropy")),
    "every-hidden-activation": net(
        [5], *(dense(4, a) for a in ACTIVATIONS), DROP, output(2, "identity", "cross_entropy"), weight_init="normal"
    ),
    "mlp-batchnorm-dropout": net(
        [6], dense(8, "elu"), BN, DROP, dense(4, "gelu"), output(1, "sigmoid", "binary_cross_entropy")
    ),
    "cnn-same": net(
        [2, 7, 6],
        conv(3, 2, padding="same"),
        conv(4, [3, 2], "leaky_relu", padding="same", bias=False),
        conv(2, 1, "tanh", padding="same"),
        {"type": "max_pool2d", "kernel_size": 2},
        BN,
        FLAT,
        output(3, "identity", "mse"),
    ),
    "cnn-valid-strides": net(
        [1, 9, 8],
        conv(3, 3, padding="valid", stride=[2, 1]),
        conv(4, [2, 3], "elu", padding=[1, 2], stride=[1, 2]),
        {"type": "avg_pool2d", "kernel_size": [2, 1], "stride": 1},
        BN,
        DROP,
        {"type": "max_pool2d", "kernel_size": 2, "stride": [1, 2]},
        FLAT,
        dense(5, "sigmoid"),
        BN,
        output(4, "softmax", "cross_entropy"),
        weight_init="kaiming_normal",
    ),
    "reshape-to-image": net(
        [16], {"type": "reshape", "shape": [1, 4, 4]}, conv(2, 3, padding=1), FLAT, output(2, "relu", "mae")
    ),
    "lstm": net([6, 3], {"type": "lstm", "units": 5}, output(3, "softmax", "cross_entropy")),
    "gru": net([4, 2], {"type": "gru", "units": 4}, dense(3), output(1, "identity", "binary_cross_entropy")),
    "stacked-return-sequences": net(
        [5, 3],
        {"type": "gru", "units": 4, "return_sequences": True},
        DROP,
        {"type": "lstm", "units": 3, "return_sequences": True},
        FLAT,
        output(2, "tanh", "mse"),
    ),
    "time-distributed": net(
        [5, 3],
        {"type": "lstm", "units": 4, "return_sequences": True},
        dense(6, "gelu"),
        output(2, "identity", "mse"),
    ),
    "time-distributed-classes": net(
        [4, 2], {"type": "gru", "units": 3, "return_sequences": True}, output(3, "softmax", "cross_entropy")
    ),
    "recurrent-mid-network": net(
        [12], {"type": "reshape", "shape": [4, 3]}, {"type": "lstm", "units": 2}, output(1, "elu", "mse")
    ),
}
for _i, _act in enumerate(ACTIVATIONS):  # every output activation with the regression losses
    SPECS[f"output-{_act}"] = net([3], dense(4), output(2, _act, ("mse", "mae")[_i % 2]))
SPECS["output-bce-identity"] = net([3], output(1, "identity", "binary_cross_entropy"))


def prepare(obj: dict[str, Any], seed: int = 0) -> Network:
    """sparktrain's module with random biases and batch-norm statistics too, in eval mode."""
    module = build_network(parse_network(obj), seed=seed)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for param in module.parameters():
            param.add_(0.3 * torch.randn(param.shape, generator=generator))
        for name, buffer in module.named_buffers():  # batch-norm statistics
            if name.endswith("running_mean"):
                buffer.copy_(torch.randn(buffer.shape, generator=generator))
            elif name.endswith("running_var"):
                buffer.copy_(torch.rand(buffer.shape, generator=generator) + 0.5)
            else:
                buffer.fill_(7)
    return module.eval()


def saved(directory: Path, obj: dict[str, Any], seed: int = 0, **card: Any) -> Network:
    module = prepare(obj, seed)
    save_model(directory, module, {"network": spec_to_dict(module.spec), **card})
    return module


def inputs(module: Network, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """Random (input, lengths): every accepted layout, and for lstm/gru-first networks other lengths and padding."""
    generator = torch.Generator().manual_seed(seed)
    shape = module.spec.input_shape
    x = torch.randn(5, *shape, generator=generator)
    cases: list[tuple[torch.Tensor, torch.Tensor | None]] = [(x, None), (x.reshape(5, -1), None), (x[:1], None)]
    if module.any_length:
        longer = torch.randn(3, shape[0] + 3, shape[1], generator=generator)
        cases += [(longer, None), (longer, torch.tensor([1, shape[0] + 3, 2]))]
        cases.append((x, torch.randint(1, shape[0] + 1, (5,), generator=generator)))
    return cases


def assert_same_outputs(
    model: standalone.Model, reference: Network, x: torch.Tensor, lengths: torch.Tensor | None
) -> None:
    try:
        with torch.no_grad():
            expected = reference(x, lengths=lengths)
    except RuntimeError as error:  # a flatten after lstm/gru fits only the nominal sequence length
        with pytest.raises(type(error)):
            model.raw(x, lengths)
        return
    got = model.raw(x, lengths)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    assert torch.equal(got, expected), (tuple(x.shape), lengths)


@pytest.mark.parametrize("name", list(SPECS))
def test_outputs_are_bitwise_equal_to_sparktrains(name: str, tmp_path: Path) -> None:
    reference = saved(tmp_path, SPECS[name], seed=len(name))
    model = standalone.load(tmp_path)
    assert not model.module.training
    # the same modules under the same names, so the same ops in the same order
    ours = [(n, type(m).__name__) for n, m in model.module.named_modules()]
    assert ours == [(n, type(m).__name__) for n, m in reference.named_modules()]
    assert list(model.module.state_dict()) == list(reference.state_dict())
    assert model.module.output_shape == reference.spec.output_shape
    for x, lengths in inputs(reference, seed=len(name)):
        assert_same_outputs(model, reference, x, lengths)


@st.composite
def network_dicts(draw: st.DrawFn) -> dict[str, Any]:
    """Small valid networks: image, sequence or flat input, every layer type."""
    kind = draw(st.sampled_from(["flat", "sequence", "image"]))
    layers: list[dict[str, Any]] = []
    if kind == "image":
        input_shape = [draw(st.integers(1, 3)), draw(st.integers(3, 8)), draw(st.integers(3, 8))]
        height, width = input_shape[1:]
        for _ in range(draw(st.integers(0, 3))):
            choice = draw(st.sampled_from(["same", "conv2d", "max_pool2d", "avg_pool2d", "batch_norm", "dropout"]))
            kh, kw = draw(st.integers(1, height)), draw(st.integers(1, width))
            stride = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
            if choice == "same":
                layers.append(conv(2, [kh, kw], draw(st.sampled_from(ACTIVATIONS[:-2])), padding="same"))
            elif choice == "conv2d":
                padding = [draw(st.integers(0, 1)), draw(st.integers(0, 1))]
                layers.append(conv(2, [kh, kw], "relu", stride=stride, padding=padding, bias=draw(st.booleans())))
                height = (height + 2 * padding[0] - kh) // stride[0] + 1
                width = (width + 2 * padding[1] - kw) // stride[1] + 1
            elif choice in ("max_pool2d", "avg_pool2d"):
                layers.append({"type": choice, "kernel_size": [kh, kw], "stride": stride})
                height, width = (height - kh) // stride[0] + 1, (width - kw) // stride[1] + 1
            else:
                layers.append(BN if choice == "batch_norm" else DROP)
        layers.append(FLAT)
    elif kind == "sequence":
        input_shape = [draw(st.integers(1, 5)), draw(st.integers(1, 3))]
        depth = draw(st.integers(1, 2))
        for i in range(depth):
            recurrent = draw(st.sampled_from(["lstm", "gru"]))
            sequences = i < depth - 1 or draw(st.booleans())
            layers.append({"type": recurrent, "units": draw(st.integers(1, 4)), "return_sequences": sequences})
        if layers[-1]["return_sequences"] and draw(st.booleans()):
            layers.append(FLAT)
    else:
        input_shape = [draw(st.integers(1, 6))]
    for _ in range(draw(st.integers(0, 2))):
        choice = draw(st.sampled_from(["dense", "dropout", "batch_norm"]))
        if choice == "dense":
            layers.append(dense(3, draw(st.sampled_from(ACTIVATIONS)), bias=draw(st.booleans())))
        elif choice == "dropout" or (kind == "sequence" and layers[-1:] != [FLAT]):
            layers.append(DROP)
        else:
            layers.append(BN)
    loss = draw(st.sampled_from(["mse", "mae", "cross_entropy", "binary_cross_entropy"]))
    if loss == "cross_entropy":
        layers.append(output(draw(st.integers(2, 4)), draw(st.sampled_from(["softmax", "identity"])), loss))
    elif loss == "binary_cross_entropy":
        layers.append(output(1, draw(st.sampled_from(["sigmoid", "identity"])), loss))
    else:
        layers.append(output(draw(st.integers(1, 3)), draw(st.sampled_from(ACTIVATIONS)), loss))
    return net(input_shape, *layers, weight_init=draw(st.sampled_from(WEIGHT_INITS)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=network_dicts(), seed=st.integers(0, 2**16))
def test_random_networks_are_bitwise_equal(obj: dict[str, Any], seed: int) -> None:
    try:
        parse_network(obj)
    except SpecError:  # e.g. batch_norm on (time, features): not what this test is about
        return
    with tempfile.TemporaryDirectory() as directory:
        reference = saved(Path(directory), obj, seed=seed)
        model = standalone.load(directory)
    for x, lengths in inputs(reference, seed=seed):
        assert_same_outputs(model, reference, x, lengths)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=network_dicts(), seed=st.integers(0, 2**16))
def test_the_loader_builds_the_trainers_module_from_the_card(obj: dict[str, Any], seed: int) -> None:
    """One builder: from the card's ``network`` (the JSON of ``spec_to_dict``) ``build_module`` gives the module the
    trainer builds (the same class, parameter names and shapes) and, with the trainer's weights, its outputs."""
    try:
        spec = parse_network(obj)
    except SpecError:
        return
    reference = prepare(obj, seed)
    module = standalone.build_module(json.loads(json.dumps(spec_to_dict(spec))))
    assert isinstance(reference, standalone.Network) and type(module) is standalone.Network
    shapes = [(name, tuple(t.shape)) for name, t in module.state_dict().items()]
    assert shapes == [(name, tuple(t.shape)) for name, t in reference.state_dict().items()]
    module.load_state_dict(reference.state_dict(), strict=True)
    for x, lengths in inputs(reference, seed=seed):
        assert_same_outputs(standalone.Model(module, {}), reference, x, lengths)


# --- predict ----------------------------------------------------------------------------------------------------


def card(module: Network, **fields: Any) -> dict[str, Any]:
    spec = module.spec
    classes = spec.output_units if spec.loss == "cross_entropy" else 2 if spec.loss == "binary_cross_entropy" else None
    base = {
        "input_shape": list(spec.input_shape),
        "features": [f"f{i}" for i in range(int(np.prod(spec.input_shape)))],
        "array_column": False,
        "labels": ["y"],
        "task": "classification" if classes else "regression",
        "num_classes": classes,
        "class_labels": None,
        "normalizer": None,
    }
    return base | fields


def save_with_card(directory: Path, obj: dict[str, Any], seed: int = 0, **fields: Any) -> Network:
    module = prepare(obj, seed)
    save_model(directory, module, {"network": spec_to_dict(module.spec), **card(module, **fields)})
    return module


def expected_predictions(module: Network, x: np.ndarray, normalizer: dict[str, Any] | None = None) -> torch.Tensor:
    """What sparktrain computes: Normalizer.apply, the module, predict_transform."""
    if normalizer is not None:
        x = Normalizer.from_dict(normalizer).apply(x)
    with torch.no_grad():
        return predict_transform(module.spec.loss, module(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))))


def test_predict_classes_with_labels_and_a_standardize_normalizer(tmp_path: Path) -> None:
    normalizer = {"kind": "standardize", "shift": [5.8, 3.0, 3.7, 1.2], "scale": [0.8, 0.4, 1.7, 0.7], "count": 150}
    labels = ["setosa", "versicolor", "virginica"]
    module = save_with_card(tmp_path, SPECS["mlp"], class_labels=labels, normalizer=normalizer)
    model = standalone.load(tmp_path)
    x = np.random.default_rng(0).normal(5.0, 2.0, size=(40, 4)).astype(np.float32)
    got = model.predict(x)
    probabilities = expected_predictions(module, x, normalizer).double()
    assert got["probabilities"] == probabilities.tolist()
    assert got["class_index"] == probabilities.argmax(dim=1).tolist()
    assert got["label"] == [labels[i] for i in got["class_index"]]
    assert len(set(got["label"])) > 1
    assert model.predict(x.tolist()) == got  # nested lists work the same
    assert model.predict(torch.from_numpy(x)) == got
    # without the normalizer the network sees other numbers
    assert model.raw(x).tolist() != model.raw(model.normalize(x)).tolist()


def test_predict_binary_gives_two_probability_columns(tmp_path: Path) -> None:
    module = save_with_card(tmp_path, SPECS["mlp-batchnorm-dropout"])
    model = standalone.load(tmp_path)
    x = np.random.default_rng(1).normal(size=(64, 6)).astype(np.float32)
    got = model.predict(x)
    p1 = expected_predictions(module, x).double()[:, 0]
    assert got["probabilities"] == torch.stack([1 - p1, p1], dim=1).tolist()
    assert got["class_index"] == (p1 > 0.5).long().tolist() == got["label"]
    assert set(got["class_index"]) == {0, 1}


def test_predict_regression_one_label_is_flat_several_are_lists(tmp_path: Path) -> None:
    one = save_with_card(
        tmp_path / "one",
        SPECS["reshape-to-image"]
        | {"layers": [*SPECS["reshape-to-image"]["layers"][:-1], output(1, "identity", "mse")]},
    )
    two = save_with_card(tmp_path / "two", SPECS["reshape-to-image"], labels=["a", "b"])
    x = np.random.default_rng(2).normal(size=(7, 16)).astype(np.float32)
    assert standalone.load(tmp_path / "one").predict(x) == {"prediction": expected_predictions(one, x)[:, 0].tolist()}
    assert standalone.load(tmp_path / "two").predict(x) == {"prediction": expected_predictions(two, x).tolist()}


def test_predict_images_with_one_shift_and_scale(tmp_path: Path) -> None:
    normalizer = {"kind": "image", "shift": [0.0], "scale": [255.0], "count": 10}
    module = save_with_card(tmp_path, SPECS["cnn-valid-strides"], normalizer=normalizer, array_column=True)
    model = standalone.load(tmp_path)
    pixels = np.random.default_rng(3).integers(0, 256, size=(9, 72)).astype(np.float32)
    got = model.predict(pixels)
    assert got["probabilities"] == expected_predictions(module, pixels, normalizer).double().tolist()
    assert model.predict(pixels.reshape(9, 1, 9, 8)) == got


def test_predict_per_step_classes_and_ragged_sequences(tmp_path: Path) -> None:
    labels = ["low", "mid", "high"]
    module = save_with_card(tmp_path, SPECS["time-distributed-classes"], class_labels=labels)
    model = standalone.load(tmp_path)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 6, 2)).astype(np.float32)
    got = model.predict(x)
    probabilities = expected_predictions(module, x).double()
    assert np.array(got["probabilities"]).shape == (3, 6, 3)
    assert got["probabilities"] == probabilities.tolist()
    assert got["label"] == [[labels[i] for i in row] for row in probabilities.argmax(dim=-1).tolist()]


def test_ragged_sequences_are_padded_after_their_steps(tmp_path: Path) -> None:
    module = save_with_card(tmp_path, SPECS["lstm"], class_labels=["a", "b", "c"])
    model = standalone.load(tmp_path)
    rng = np.random.default_rng(5)
    sequences = [rng.normal(size=(n, 3)).astype(np.float32) for n in (2, 9, 5)]
    padded = np.zeros((3, 9, 3), np.float32)
    for i, s in enumerate(sequences):
        padded[i, : len(s)] = s
    got = model.predict([s.tolist() for s in sequences])
    assert got == model.predict(padded, lengths=[2, 9, 5])
    with torch.no_grad():
        logits = module(torch.from_numpy(padded), lengths=torch.tensor([2, 9, 5]))
    assert got["probabilities"] == torch.softmax(logits, dim=-1).double().tolist()
    # one sequence alone gives the same as in the batch (the last valid step, whatever the padding)
    np.testing.assert_allclose(model.predict([sequences[0]])["probabilities"][0], got["probabilities"][0], rtol=1e-6)


def test_single_rows_one_feature_and_no_rows(tmp_path: Path) -> None:
    save_with_card(tmp_path / "mlp", SPECS["mlp"])
    model = standalone.load(tmp_path / "mlp")
    assert model.predict([1.0, 2.0, 3.0, 4.0]) == model.predict([[1.0, 2.0, 3.0, 4.0]])
    assert model.predict(np.zeros((0, 4))) == {"class_index": [], "label": [], "probabilities": []}
    assert model.predict([]) == {"class_index": [], "label": [], "probabilities": []}
    save_with_card(tmp_path / "one", net([1], dense(2), output(1)))
    single = standalone.load(tmp_path / "one")
    assert single.predict([1.0, 2.0, 3.0]) == single.predict([[1.0], [2.0], [3.0]])
    assert len(single.predict([1.0, 2.0, 3.0])["prediction"]) == 3


def test_batches_do_not_change_the_rows(tmp_path: Path) -> None:
    save_with_card(tmp_path, SPECS["gru"])
    model = standalone.load(tmp_path)
    x = np.random.default_rng(6).normal(size=(10, 4, 2)).astype(np.float32)
    whole, batched = model.predict(x, lengths=[4] * 10), model.predict(x, lengths=[4] * 10, batch_size=3)
    assert whole["class_index"] == batched["class_index"]
    np.testing.assert_allclose(whole["probabilities"], batched["probabilities"], rtol=1e-6)
    assert "classification" in repr(model) and "binary_cross_entropy" in repr(model)


# --- errors -----------------------------------------------------------------------------------------------------


def rewrite_spec(directory: Path, change: Any) -> None:
    path = directory / "spec.json"
    spec = json.loads(path.read_text())
    change(spec)
    path.write_text(json.dumps(spec))


def test_unknown_layer_type_or_activation_names_a_newer_sparktrain(tmp_path: Path) -> None:
    save_with_card(tmp_path, SPECS["mlp"])
    rewrite_spec(tmp_path, lambda s: s["network"]["layers"].insert(1, {"type": "attention", "heads": 2}))
    with pytest.raises(ValueError, match=r"layers\[1\]: unknown layer type 'attention'.*newer sparktrain"):
        standalone.load(tmp_path)

    def swish(spec: dict[str, Any]) -> None:
        del spec["network"]["layers"][1]
        spec["network"]["layers"][0]["activation"] = "swish"

    rewrite_spec(tmp_path, swish)
    with pytest.raises(ValueError, match=r"unknown activation 'swish'.*newer sparktrain"):
        standalone.load(tmp_path)
    with pytest.raises(ValueError, match="last layer must be the output layer"):
        standalone.build_module(net([3], dense(2)))


def test_weights_that_do_not_fit_the_spec(tmp_path: Path) -> None:
    save_with_card(tmp_path, SPECS["mlp"])
    rewrite_spec(tmp_path, lambda s: s["network"]["layers"][0].update(units=9))
    with pytest.raises(ValueError, match=r"layers\.0\.linear\.weight has shape \(8, 4\), the network needs \(9, 4\)"):
        standalone.load(tmp_path)
    rewrite_spec(tmp_path, lambda s: s["network"]["layers"][0].update(units=8))
    tensors = load_file(str(tmp_path / "weights.safetensors"))
    save_file({**tensors, "layers.9.linear.weight": torch.zeros(1)}, str(tmp_path / "weights.safetensors"))
    with pytest.raises(ValueError, match=r"unexpected layers\.9\.linear\.weight"):
        standalone.load(tmp_path)
    del tensors["layers.1.linear.weight"]
    save_file(tensors, str(tmp_path / "weights.safetensors"))
    with pytest.raises(ValueError, match=r"missing layers\.1\.linear\.weight"):
        standalone.load(tmp_path)


def test_missing_files_and_directories(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        standalone.load(tmp_path / "nope")
    save_with_card(tmp_path / "model", SPECS["mlp"])
    with pytest.raises(FileNotFoundError, match=r"no spec\.json and no weights\.safetensors.*found one in .*model"):
        standalone.load(tmp_path)
    (tmp_path / "model" / "weights.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"has no weights\.safetensors: it is not a sparktrain model"):
        standalone.load(tmp_path / "model")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "spec.json").write_text('{"layers": []}')
    shutil.copy(tmp_path / "model" / "spec.json", tmp_path / "other" / "weights.safetensors")
    with pytest.raises(ValueError, match="no 'network' object"):
        standalone.load(tmp_path / "other")


def test_bad_input_shapes(tmp_path: Path) -> None:
    normalizer = {"kind": "standardize", "shift": [0.0] * 4, "scale": [1.0] * 4, "count": 1}
    save_with_card(tmp_path / "mlp", SPECS["mlp"], normalizer=normalizer)
    save_with_card(tmp_path / "lstm", SPECS["lstm"])
    mlp, lstm = standalone.load(tmp_path / "mlp"), standalone.load(tmp_path / "lstm")
    with pytest.raises(ValueError, match="normalizer was fitted on 4 features, the rows have 5"):
        mlp.predict(np.zeros((2, 5)))
    with pytest.raises(ValueError, match=r"expected input of shape \(batch, 4\), got \(2, 5\)"):
        mlp.raw(np.zeros((2, 5)))
    with pytest.raises(ValueError, match="different numbers of values"):
        mlp.predict([[1, 2, 3, 4], [1, 2]])
    with pytest.raises(ValueError, match=r"each sequence must be \(time, 3\)"):
        lstm.predict([[[1, 2, 3]], [[1, 2], [3, 4]]])
    with pytest.raises(ValueError, match=r"lengths must give 1\.\.time steps"):
        lstm.predict(np.zeros((2, 6, 3)), lengths=[0, 6])
    with pytest.raises(ValueError, match=r"lengths must give 1\.\.time steps"):
        lstm.predict(np.zeros((2, 6, 3)), lengths=[7])


# --- the file stands alone --------------------------------------------------------------------------------------


def _imports(tree: ast.AST) -> set[str]:
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports"
            imported.add((node.module or "").split(".")[0])
    return imported


def test_imports_only_the_stdlib_torch_numpy_and_safetensors() -> None:
    """pandas only inside the MLflow python_function entry point (MLflow hands it DataFrames, so it has pandas)."""
    allowed = set(sys.stdlib_module_names) | {"torch", "numpy", "safetensors"}
    tree = ast.parse(SOURCE.read_text())
    pyfunc = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "_PyFunc")
    elsewhere = _imports(ast.Module(body=[n for n in tree.body if n is not pyfunc], type_ignores=[]))
    assert elsewhere <= allowed, elsewhere - allowed
    assert {"torch", "numpy", "safetensors"} <= elsewhere
    assert _imports(pyfunc) <= allowed | {"pandas"}


def test_build_module_leaves_the_global_rng_alone() -> None:
    state = torch.get_rng_state()
    module = standalone.build_module(SPECS["cnn-same"])
    assert torch.equal(state, torch.get_rng_state())
    assert all(not p.any() for p in module.parameters() if p.dim() > 1)


def test_the_copied_file_runs_without_sparktrain(tmp_path: Path) -> None:
    """An unpacked archive: sparktrain_model.py + spec.json + weights.safetensors, run as the docstring says (from
    that directory) by python -S, so not even the editable install of sparktrain is on the path: only the
    directories of torch, numpy and safetensors are."""
    labels = ["no", "yes"]
    module = save_with_card(tmp_path, SPECS["mlp-batchnorm-dropout"], class_labels=labels)
    shutil.copy(SOURCE, tmp_path / "sparktrain_model.py")
    rows = np.random.default_rng(7).normal(size=(5, 6)).round(3).tolist()
    expected = standalone.load(tmp_path).predict(rows)
    assert (
        expected["probabilities"]
        == torch.cat([1 - (p := expected_predictions(module, np.array(rows, np.float32)).double()), p], dim=1).tolist()
    )

    import numpy
    import safetensors

    packages = {str(Path(m.__file__ or "").parents[1]) for m in (torch, numpy, safetensors)}
    repo = str(Path(__file__).resolve().parents[3])
    assert repo not in packages and not any(Path(p, "workers").exists() for p in packages)
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(sorted(packages))}
    code = f"""
import sys
import sparktrain_model as m
model = m.load('.')
assert 'workers' not in sys.modules and 'app' not in sys.modules, sorted(sys.modules)
try:
    import workers
except ImportError:
    pass
else:
    raise SystemExit('workers is importable: ' + str(workers.__path__))
assert m.__file__ == {str(tmp_path / "sparktrain_model.py")!r}, m.__file__
import json
print(json.dumps(model.predict({rows!r})))
"""
    for command in (["-c", code], ["sparktrain_model.py", ".", json.dumps(rows)]):
        run = subprocess.run(
            [sys.executable, "-S", *command], check=False, cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout) == expected


# --- rows of named columns, and categorical inputs encoded as in training ---------------------------------------


def test_rows_of_named_columns_are_the_cards_features_in_order(tmp_path: Path) -> None:
    save_with_card(tmp_path, SPECS["mlp"], class_labels=["a", "b", "c"])
    model = standalone.load(tmp_path)
    x = np.random.default_rng(3).normal(size=(6, 4)).round(3)
    records = [{f"f{j}": float(v) for j, v in reversed(list(enumerate(row)))} for row in x]  # any column order
    expected = model.predict(x)
    assert model.predict(records) == expected
    assert model.predict(records[0]) == model.predict(x[:1])  # one row as a dict
    import pandas as pd

    assert model.predict(pd.DataFrame(records)) == expected
    assert model.predict([{**r, "f1": str(r["f1"]), "extra": "ignored"} for r in records]) == expected
    with pytest.raises(ValueError, match=r"row 1 has no 'f2'; the model's columns are \['f0', 'f1', 'f2', 'f3'\]"):
        model.predict([records[0], {k: v for k, v in records[1].items() if k != "f2"}])
    with pytest.raises(ValueError, match="row 0: f3: 'high' is not a number"):
        model.predict([{**records[0], "f3": "high"}])


CATEGORICAL = {"inputs": ["d", "city", "tier", "flag"], "levels": {"city": ["east", "north"], "tier": ["1", "2"],
               "flag": ["false", "true"]}, "types": {"city": "string", "tier": "int", "flag": "boolean"}}  # fmt: skip


def test_categorical_inputs_encode_as_sparktrains_encoding(tmp_path: Path) -> None:
    from workers.data.categories import Categories

    cats = Categories.from_dict(CATEGORICAL)
    net = {"input_shape": [len(cats.names)], "layers": [dense(5, "tanh"), output(2, "identity", "cross_entropy")]}
    module = save_with_card(tmp_path, net, features=list(cats.names), categorical=CATEGORICAL)
    model = standalone.load(tmp_path)
    rows = [{"d": 2.5, "city": "north", "tier": "02", "flag": True}, {"d": 1, "city": "west", "tier": 1.0, "flag": 0},
            {"d": -3, "city": "east", "tier": 2, "flag": "TRUE"}]  # fmt: skip
    encoded, problems = cats.encode(rows)
    assert problems == [] and model.records(rows).tolist() == encoded.astype(np.float32).tolist()
    assert encoded[1, 1:3].tolist() == [0, 0]  # an unseen city: all zeros, as online and in Spark
    got = model.predict(rows)
    assert got["probabilities"] == expected_predictions(module, encoded.astype(np.float32)).tolist()
    assert model.predict(encoded) == got  # the one-hot columns, as MLflow's flavors take them, still work
    one_hot = [dict(zip(cats.names, map(float, r), strict=True)) for r in encoded]
    assert model.predict(one_hot) == got
    import pandas as pd

    pyfunc = standalone._PyFunc(model)
    assert pyfunc.predict(pd.DataFrame(rows))["probabilities"].tolist() == got["probabilities"]
    assert pyfunc.predict(pd.DataFrame(one_hot))["probabilities"].tolist() == got["probabilities"]
    with pytest.raises(ValueError, match="row 0: city is null; a categorical feature needs a category"):
        model.predict([{**rows[0], "city": None}])
    with pytest.raises(ValueError, match="row 0: tier: 'A1' is not a whole number"):
        model.predict([{**rows[0], "tier": "A1"}])
    with pytest.raises(ValueError, match=r"row 0 has no 'city'; the model's columns are \['d', 'city', 'tier', 'fl"):
        model.predict([{"d": 1.0, "tier": 1, "flag": True}])


@pytest.mark.parametrize("kind", ["string", "tinyint", "int", "bigint", "boolean"])
@pytest.mark.parametrize(
    "value",
    [True, False, 3, np.int64(3), 1.5, 2134.0, 2.0, 0.0, 1, 0, 2, -1, "north", "02134", " 7", "+4", "-0", "3.0", "1e3",
     "True", "yes", " N ", "t", "1", "0", "2", "x", "", "4 4", "+", "٣", None, float("nan"), float("inf"), -0.0,
     2**31, -(2**31), 2**63, 3e9, 1e20, "99999999999", "-2147483648", np.int64(2**62)],
)  # fmt: skip
def test_the_loaders_category_reading_is_sparktrains(value: object, kind: str) -> None:
    """The archive's loader cannot import sparktrain, so it has its own copy of ``level_of``: the same answers."""
    from workers.data.categories import level_of

    try:
        expected: str | None = level_of(value, kind)
    except ValueError:
        expected = "refused"
    try:
        got: str | None = standalone._category(value, kind, "c")
    except ValueError as exc:
        got = None if "is null" in str(exc) else "refused"
    assert got == expected


def test_the_copied_files_command_line_says_what_is_wrong_in_one_line(tmp_path: Path) -> None:
    save_with_card(tmp_path, SPECS["mlp"])
    shutil.copy(SOURCE, tmp_path / "sparktrain_model.py")
    for rows, words in [("[[1, 2]]", "expected input of shape (batch, 4), got (1, 2)"),
                        ("[[1, 2", "the rows are not JSON (Expecting"), ("not json", "give a JSON list of rows"),
                        ("null", "rows must be a list of rows (or one row), not a single value: None"),
                        ('[{"f0": 1}]', "row 0 has no 'f1', 'f2', 'f3'")]:  # fmt: skip
        run = subprocess.run([sys.executable, "sparktrain_model.py", ".", rows], check=False, cwd=tmp_path,
                             capture_output=True, text=True)  # fmt: skip
        assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
        assert run.stderr.startswith("sparktrain_model.py: ") and words in run.stderr, run.stderr
    records = json.dumps([{"f0": 1, "f1": 2, "f2": 3, "f3": 4}])
    run = subprocess.run([sys.executable, "sparktrain_model.py", ".", records], check=False, cwd=tmp_path,
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0 and json.loads(run.stdout) == standalone.load(tmp_path).predict([[1, 2, 3, 4]])


def _signed(directory: Path) -> standalone.Model:
    """The mlp (f0..f3, three classes) with a recorded signature: f0 a whole number, f2 a boolean."""
    from workers.inference.signature import build_signature

    fields = {"features": ["f0", "f1", "f2", "f3"], "task": "classification", "labels": ["y"]}
    types = {"f0": "int", "f1": "double", "f2": "boolean", "f3": "double"}
    save_with_card(directory, SPECS["mlp"], signature=build_signature(fields, types))
    shutil.copy(SOURCE, directory / "sparktrain_model.py")
    return standalone.load(directory)


@pytest.mark.parametrize(
    ("rows", "words"),
    [("[[1, null, true, 4]]", "row 0: column 'f1' is null: a feature is NaN, infinite, missing or beyond float32"),
     ("[[1, 2, true, 4], [1, NaN, false, 4]]", "row 1: column 'f1' is NaN: a feature is NaN"),
     ("[[1, 1e39, true, 4]]", "row 0: column 'f1' is 1e+39: a feature is NaN, infinite, missing or beyond float32"),
     ("[[1, -Infinity, true, 4]]", "row 0: column 'f1' is -Infinity: a feature"),
     ("[[1, true, true, 4]]", "row 0: column 'f1' takes numbers: true is not a number"),
     ('[[1, "2.1", true, 4]]', "row 0: column 'f1' takes numbers: \"2.1\" is not a number"),
     ("[[1.5, 2, true, 4]]", "row 0: column 'f0' takes whole numbers: 1.5 is not a whole number"),
     ("[[1, 2, -7, 4]]", "row 0: column 'f2' takes booleans: -7 is not a boolean"),
     ('[{"f0": 1, "f1": 2, "f2": true, "f3": null}]', "row 0: column 'f3' is null"),
     ('[{"f0": 1, "f1": 2, "f2": true, "f3": 4, "tip": 1}]',
      "row 0: unexpected columns ['tip']; the model's columns are ['f0', 'f1', 'f2', 'f3']"),
     ('{"f0": 1, "f1": 2, "f2": 2, "f3": 4}', "row 0: column 'f2' takes booleans: 2 is not a boolean"),
     ("[1, 2, true, null]", "row 0: column 'f3' is null")],
)  # fmt: skip
def test_json_rows_are_held_to_predicts_checks(tmp_path: Path, rows: str, words: str) -> None:
    """``python sparktrain_model.py . ROWS`` printed {"probabilities": [[NaN, NaN, NaN]]} (not JSON) for a null, and
    took true, "2.1", 1.5 for a whole number and an unknown column without a word; /predict refuses each (422)."""
    model = _signed(tmp_path)
    with pytest.raises(ValueError) as refused:
        model.check(json.loads(rows))
    assert str(refused.value).startswith(words), refused.value
    assert model.check(json.loads("[[1, 2.5, true, 4], [2, -0.5, 0, 1e30]]")) is None
    assert model.check([{"f0": 1, "f1": 2.5, "f2": False, "f3": 4}]) is None


def test_the_command_line_refuses_bad_rows_and_never_prints_nan(tmp_path: Path) -> None:
    model = _signed(tmp_path)

    def run(rows: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "sparktrain_model.py", ".", rows], check=False, cwd=cwd,
                              capture_output=True, text=True)  # fmt: skip

    refusals = [("[[1, null, true, 4]]", "row 0: column 'f1' is null"),
                ('[{"f0": 1, "f1": 2, "f2": true, "f3": 4, "x": 0}]', "row 0: unexpected columns ['x']")]  # fmt: skip
    for rows, words in refusals:
        refused = run(rows, tmp_path)
        assert refused.returncode == 1 and refused.stdout == "", refused
        assert refused.stderr.startswith(f"sparktrain_model.py: {words}") and len(refused.stderr.splitlines()) == 1
    answered = run("[[1, 2.5, true, 4]]", tmp_path)
    assert answered.returncode == 0 and json.loads(answered.stdout) == model.predict([[1, 2.5, 1, 4]])
    big = tmp_path / "big"  # finite rows, weights that overflow float32: an infinite answer, which JSON cannot hold
    save_with_card(big, net([2], dense(2), output(1)))
    shutil.copy(SOURCE, big / "sparktrain_model.py")
    weights = load_file(str(big / "weights.safetensors"))
    save_file({k: torch.full_like(v, 1e30) for k, v in weights.items()}, str(big / "weights.safetensors"))
    assert standalone.load(big).predict([[1e20, 1e20]])["prediction"] == [float("inf")]
    overflow = run("[[1e20, 1e20]]", big)
    assert (overflow.returncode, overflow.stdout) == (1, ""), overflow
    said = "sparktrain_model.py: the model answered NaN or infinity for these rows: no JSON for them\n"
    assert overflow.stderr == said
