import json
import math
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn import functional

from workers.training.torch.network import (
    Network,
    build_network,
    flat_parameters,
    make_loss,
    predict_transform,
)
from workers.training.torch.spec import (
    ACTIVATIONS,
    WEIGHT_INITS,
    NetworkSpec,
    parameter_count,
    parse_network,
    spec_to_dict,
)

HIDDEN = [a for a in ACTIVATIONS if a != "softmax"]


def spec_of(input_shape: list[int], *layers: dict[str, Any]) -> NetworkSpec:
    return parse_network({"input_shape": input_shape, "layers": list(layers)})


def dense(units: int, activation: str = "relu", **kw: Any) -> dict[str, Any]:
    return {"type": "dense", "units": units, "activation": activation, **kw}


def output(units: int, activation: str = "identity", loss: str = "mse") -> dict[str, Any]:
    return {"type": "output", "units": units, "activation": activation, "loss": loss}


MLP = spec_of([64], dense(64), dense(32, "tanh"), output(1))
CNN = spec_of(
    [1, 8, 8],
    {"type": "conv2d", "filters": 8, "kernel_size": 3, "padding": 1, "activation": "relu"},
    {"type": "max_pool2d", "kernel_size": 2},
    {"type": "conv2d", "filters": 16, "kernel_size": 3, "activation": "relu"},
    {"type": "flatten"},
    dense(32),
    output(10, "softmax", "cross_entropy"),
)
LSTM = spec_of([12, 3], {"type": "lstm", "units": 16}, output(2, "identity", "mse"))


# --- random valid specs ---------------------------------------------------------------------------


@st.composite
def network_dicts(draw: st.DrawFn) -> dict[str, Any]:
    """Valid networks by construction: image, sequence or flat input, small sizes, every layer type."""
    small = st.integers(1, 4)
    kind = draw(st.sampled_from(["flat", "sequence", "image"]))
    layers: list[dict[str, Any]] = []
    if kind == "image":
        channels, height, width = draw(small), draw(st.integers(3, 9)), draw(st.integers(3, 9))
        input_shape = [channels, height, width]
        for _ in range(draw(st.integers(0, 3))):
            choice = draw(st.sampled_from(["conv2d", "max_pool2d", "avg_pool2d", "batch_norm", "dropout"]))
            kh, kw = draw(st.integers(1, height)), draw(st.integers(1, width))
            if choice == "conv2d":
                layer: dict[str, Any] = {
                    "type": "conv2d",
                    "filters": draw(small),
                    "kernel_size": [kh, kw],
                    "activation": draw(st.sampled_from(HIDDEN)),
                    "bias": draw(st.booleans()),
                }
                if draw(st.booleans()):
                    layer["padding"] = "same"
                else:
                    ph, pw = draw(st.integers(0, 1)), draw(st.integers(0, 1))
                    sh, sw = draw(small), draw(small)
                    layer.update(padding=[ph, pw], stride=[sh, sw])
                    height, width = (height + 2 * ph - kh) // sh + 1, (width + 2 * pw - kw) // sw + 1
                channels = layer["filters"]
            elif choice in ("max_pool2d", "avg_pool2d"):
                layer = {"type": choice, "kernel_size": [kh, kw]}
                sh, sw = kh, kw
                if draw(st.booleans()):
                    sh, sw = draw(small), draw(small)
                    layer["stride"] = [sh, sw]
                height, width = (height - kh) // sh + 1, (width - kw) // sw + 1
            elif choice == "batch_norm":
                layer = {"type": "batch_norm"}
            else:
                layer = {"type": "dropout", "rate": draw(st.floats(0, 0.9))}
            layers.append(layer)
        layers.append({"type": "flatten"})
    elif kind == "sequence":
        input_shape = [draw(st.integers(1, 5)), draw(small)]
        depth = draw(st.integers(1, 3))
        for i in range(depth):
            last = i == depth - 1
            layers.append(
                {
                    "type": draw(st.sampled_from(["lstm", "gru"])),
                    "units": draw(small),
                    "return_sequences": not last or draw(st.booleans()),
                }
            )
            if not last and draw(st.booleans()):
                layers.append({"type": "dropout", "rate": 0.1})
        if layers[-1]["return_sequences"]:
            layers.append({"type": "flatten"})
    else:
        input_shape = [draw(st.integers(1, 6))]
    for _ in range(draw(st.integers(0, 3))):
        choice = draw(st.sampled_from(["dense", "batch_norm", "dropout"]))
        if choice == "dense":
            layers.append(dense(draw(small), draw(st.sampled_from(ACTIVATIONS)), bias=draw(st.booleans())))
        else:
            layers.append({"type": choice} if choice == "batch_norm" else {"type": "dropout", "rate": 0.5})
    loss = draw(st.sampled_from(["mse", "mae", "cross_entropy", "binary_cross_entropy"]))
    if loss == "cross_entropy":
        layers.append(output(draw(st.integers(2, 4)), draw(st.sampled_from(["softmax", "identity"])), loss))
    elif loss == "binary_cross_entropy":
        layers.append(output(1, draw(st.sampled_from(["sigmoid", "identity"])), loss))
    else:
        layers.append(output(draw(small), draw(st.sampled_from(ACTIVATIONS)), loss))
    return {
        "input_shape": input_shape,
        "layers": layers,
        "weight_init": draw(st.sampled_from(WEIGHT_INITS)),
        "l2": draw(st.sampled_from([0.0, 1e-4])),
    }


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(network_dicts(), st.integers(0, 2**31))
def test_parameter_count_and_shapes_match_the_built_module(obj: dict[str, Any], seed: int) -> None:
    spec = parse_network(obj)
    assert parse_network(json.loads(json.dumps(spec_to_dict(spec)))) == spec
    module = build_network(spec, seed=seed)
    assert parameter_count(spec) == sum(p.numel() for p in module.parameters())

    seen: list[tuple[int, ...]] = []
    hooks = [layer.register_forward_hook(lambda m, i, o: seen.append(tuple(o.shape[1:]))) for layer in module.layers]
    module.eval()
    with torch.no_grad():
        y = module(torch.randn(2, *spec.input_shape))
    for hook in hooks:
        hook.remove()
    assert seen == list(spec.shapes)
    assert y.shape == (2, *spec.output_shape)
    assert torch.isfinite(y).all()


def test_parameter_count_for_every_layer_type() -> None:
    specs = [
        MLP,
        CNN,
        LSTM,
        spec_of([5, 4], {"type": "gru", "units": 3, "return_sequences": True}, {"type": "flatten"}, output(2)),
        spec_of(
            [2, 6, 6],
            {"type": "conv2d", "filters": 3, "kernel_size": [3, 2], "bias": False, "activation": "elu"},
            {"type": "batch_norm"},
            {"type": "avg_pool2d", "kernel_size": 2},
            {"type": "dropout", "rate": 0.3},
            {"type": "flatten"},
            dense(5, "gelu", bias=False),
            {"type": "batch_norm"},
            {"type": "reshape", "shape": [5, 1]},
            {"type": "flatten"},
            output(1, "sigmoid", "binary_cross_entropy"),
        ),
    ]
    for spec in specs:
        assert parameter_count(spec) == sum(p.numel() for p in build_network(spec, seed=0).parameters())


# --- determinism and initialisation ---------------------------------------------------------------


def state(module: nn.Module) -> dict[str, torch.Tensor]:
    return module.state_dict()


@pytest.mark.parametrize("weight_init", [w for w in WEIGHT_INITS if w != "zeros"])
def test_same_seed_is_bitwise_identical_and_other_seeds_differ(weight_init: str) -> None:
    obj = spec_to_dict(CNN) | {"weight_init": weight_init}
    spec = parse_network(obj)
    a, b, c = build_network(spec, seed=7), build_network(spec, seed=7), build_network(spec, seed=8)
    for (name, x), y, z in zip(state(a).items(), state(b).values(), state(c).values(), strict=True):
        assert x.dtype == y.dtype and torch.equal(x, y), name
        if name.endswith("weight"):
            assert not torch.equal(x, z), name


def test_build_leaves_the_global_rng_alone() -> None:
    before = torch.random.get_rng_state()
    build_network(LSTM, seed=1)
    assert torch.equal(before, torch.random.get_rng_state())
    torch.manual_seed(0)
    first = state(build_network(LSTM, seed=3))
    torch.manual_seed(99)
    second = state(build_network(LSTM, seed=3))
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_biases_zero_batch_norm_identity_and_weight_scales() -> None:
    spec = spec_of([400], dense(300), {"type": "batch_norm"}, output(1))
    module = build_network(parse_network(spec_to_dict(spec) | {"weight_init": "normal"}), seed=0)
    linear = module.layers[0].linear
    assert torch.equal(linear.bias, torch.zeros(300))
    assert abs(linear.weight.std().item() - 1 / math.sqrt(400)) < 0.002
    bn = module.layers[1]
    assert torch.equal(bn.weight, torch.ones(300)) and torch.equal(bn.bias, torch.zeros(300))
    assert torch.equal(bn.running_mean, torch.zeros(300)) and torch.equal(bn.running_var, torch.ones(300))
    assert bn.num_batches_tracked.item() == 0

    uniform = build_network(parse_network(spec_to_dict(spec) | {"weight_init": "uniform"}), seed=0)
    assert uniform.layers[0].linear.weight.abs().max().item() <= 1 / math.sqrt(400)
    xavier = build_network(spec, seed=0).layers[0].linear.weight
    assert xavier.abs().max().item() <= math.sqrt(6 / (400 + 300))
    zeros = build_network(parse_network(spec_to_dict(spec) | {"weight_init": "zeros"}), seed=0)
    assert all(not p.any() for name, p in zeros.named_parameters() if "layers.1" not in name)


def test_flat_parameters_follow_module_parameters_order() -> None:
    module = build_network(LSTM, seed=0)
    flat = flat_parameters(module)
    assert [id(p) for p in flat] == [id(p) for p in module.parameters()]
    names = [name for name, _ in module.named_parameters()]
    assert names == [
        "layers.0.rnn.weight_ih_l0",
        "layers.0.rnn.weight_hh_l0",
        "layers.0.rnn.bias_ih_l0",
        "layers.0.rnn.bias_hh_l0",
        "layers.1.linear.weight",
        "layers.1.linear.bias",
    ]
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in flat)


# --- forward --------------------------------------------------------------------------------------


def test_forward_shapes_of_the_examples() -> None:
    assert isinstance(build_network(MLP, seed=0), Network)
    assert build_network(MLP, seed=0)(torch.randn(5, 64)).shape == (5, 1)
    cnn = build_network(CNN, seed=0)
    assert cnn(torch.randn(5, 1, 8, 8)).shape == (5, 10)
    assert cnn(torch.randn(5, 64)).shape == (5, 10)  # flat rows are reshaped to input_shape
    assert build_network(LSTM, seed=0)(torch.randn(5, 12, 3)).shape == (5, 2)


def test_forward_rejects_the_wrong_input_shape() -> None:
    with pytest.raises(ValueError, match=r"expected input of shape \(batch, 1, 8, 8\), got \(5, 8, 8\)"):
        build_network(CNN, seed=0)(torch.randn(5, 8, 8))


def test_lengths_take_the_last_valid_step() -> None:
    for layer in ("lstm", "gru"):
        spec = spec_of([6, 2], {"type": layer, "units": 4}, output(3))
        module = build_network(spec, seed=1)
        x = torch.randn(3, 6, 2)
        lengths = torch.tensor([6, 2, 4])
        padded = x.clone()
        padded[1, 2:] = 1e3
        padded[2, 4:] = -7.0
        y = module(padded, lengths)
        for row, n in enumerate(lengths.tolist()):
            expected = module.layers[1](module.layers[0](x[row : row + 1, :n]))
            torch.testing.assert_close(y[row], expected[0])
        assert not torch.allclose(module(padded)[1], y[1])


def test_return_sequences_feeds_the_next_recurrent_layer() -> None:
    spec = spec_of(
        [7, 3], {"type": "gru", "units": 5, "return_sequences": True}, {"type": "lstm", "units": 4}, output(2)
    )
    module = build_network(spec, seed=0)
    assert module(torch.randn(2, 7, 3), torch.tensor([7, 3])).shape == (2, 2)


def test_output_activation_applies_only_to_regression_losses() -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 4) * 10
    reg = build_network(spec_of([4], output(3, "sigmoid", "mse")), seed=0)
    y = reg(x)
    assert ((y >= 0) & (y <= 1)).all()
    torch.testing.assert_close(predict_transform(reg.spec.loss, y), y)

    ce = build_network(spec_of([4], output(3, "softmax", "cross_entropy")), seed=0)
    logits = ce(x)
    assert not torch.allclose(logits.sum(dim=1), torch.ones(64))
    probs = predict_transform(ce.spec.loss, logits)
    torch.testing.assert_close(probs, torch.softmax(logits, dim=1))
    torch.testing.assert_close(probs.sum(dim=1), torch.ones(64))

    bce = build_network(spec_of([4], output(1, "sigmoid", "binary_cross_entropy")), seed=0)
    logits = bce(x)
    assert (logits < 0).any() and (logits > 1).any()
    torch.testing.assert_close(predict_transform(bce.spec.loss, logits), torch.sigmoid(logits))


def test_hidden_softmax_and_every_activation_run() -> None:
    for activation in ACTIVATIONS:
        module = build_network(spec_of([3], dense(4, activation), output(1)), seed=0)
        assert module(torch.randn(2, 3)).shape == (2, 1)
    hidden_softmax = build_network(spec_of([3], dense(4, "softmax"), output(1)), seed=0)
    torch.testing.assert_close(hidden_softmax.layers[0](torch.randn(2, 3)).sum(dim=1), torch.ones(2))


# --- loss -----------------------------------------------------------------------------------------


def test_losses_match_torch_without_mask() -> None:
    torch.manual_seed(0)
    out3, out1 = torch.randn(8, 3), torch.randn(8, 1)
    classes = torch.randint(0, 3, (8,))
    binary = torch.randint(0, 2, (8,)).float()
    values = torch.randn(8, 3)
    ce = make_loss(spec_of([2], output(3, "softmax", "cross_entropy")))
    torch.testing.assert_close(ce(out3, classes), functional.cross_entropy(out3, classes))
    torch.testing.assert_close(ce(out3, classes.int().reshape(8, 1)), functional.cross_entropy(out3, classes))
    bce = make_loss(spec_of([2], output(1, "sigmoid", "binary_cross_entropy")))
    expected = functional.binary_cross_entropy_with_logits(out1, binary.reshape(8, 1))
    torch.testing.assert_close(bce(out1, binary), expected)
    torch.testing.assert_close(bce(out1, binary.reshape(8, 1)), expected)
    mse = make_loss(spec_of([2], output(3)))
    torch.testing.assert_close(mse(out3, values), functional.mse_loss(out3, values))
    mae = make_loss(spec_of([2], output(3, loss="mae")))
    torch.testing.assert_close(mae(out3, values), functional.l1_loss(out3, values))


def test_loss_rejects_bad_targets() -> None:
    ce = make_loss(spec_of([2], output(3, "softmax", "cross_entropy")))
    with pytest.raises(TypeError, match="integer class indices"):
        ce(torch.randn(4, 3), torch.zeros(4))
    mse = make_loss(spec_of([2], output(3)))
    with pytest.raises(ValueError, match="do not fit"):
        mse(torch.randn(4, 3), torch.zeros(4))
    with pytest.raises(ValueError, match="mask of shape"):
        mse(torch.randn(4, 3), torch.zeros(4, 3), mask=torch.ones(3))


def test_mask_gives_the_mean_over_unmasked_elements_and_ignores_their_targets() -> None:
    torch.manual_seed(0)
    outputs = torch.randn(6, 2, requires_grad=True)
    targets = torch.randn(6, 2)
    mask = torch.tensor([1, 1, 0, 1, 0, 0], dtype=torch.bool)
    poisoned = targets.clone()
    poisoned[~mask] = float("nan")
    loss = make_loss(spec_of([2], output(2)))(outputs, poisoned, mask=mask)
    torch.testing.assert_close(loss, functional.mse_loss(outputs[mask], targets[mask]))
    loss.backward()
    assert outputs.grad is not None and torch.isfinite(outputs.grad).all()
    assert not outputs.grad[~mask].any()

    per_element = torch.tensor([[1, 0], [1, 1], [0, 0], [0, 1], [0, 0], [0, 0]], dtype=torch.float32)
    loss = make_loss(spec_of([2], output(2, loss="mae")))(outputs, targets, mask=per_element)
    expected = ((outputs - targets).abs() * per_element).sum() / 4
    torch.testing.assert_close(loss, expected)

    ce = make_loss(spec_of([2], output(3, "softmax", "cross_entropy")))
    logits = torch.randn(4, 3)
    classes = torch.tensor([0, 2, -1, 1])  # a padding row with an invalid class index
    keep = torch.tensor([1.0, 1.0, 0.0, 1.0])
    torch.testing.assert_close(
        ce(logits, classes, mask=keep), functional.cross_entropy(logits[[0, 1, 3]], classes[[0, 1, 3]])
    )
    assert ce(logits, classes, mask=torch.zeros(4)).item() == 0.0


def test_weights_give_a_weighted_mean() -> None:
    torch.manual_seed(0)
    outputs, targets = torch.randn(4, 1), torch.randint(0, 2, (4, 1)).float()
    weight = torch.tensor([1.0, 3.0, 0.5, 0.0])
    mask = torch.tensor([1, 1, 0, 1])
    bce = make_loss(spec_of([2], output(1, "sigmoid", "binary_cross_entropy")))
    per_row = functional.binary_cross_entropy_with_logits(outputs, targets, reduction="none").squeeze(1)
    torch.testing.assert_close(bce(outputs, targets, weight=weight), (per_row * weight).sum() / weight.sum())
    kept = weight * mask
    torch.testing.assert_close(bce(outputs, targets, mask=mask, weight=weight), (per_row * kept).sum() / kept.sum())


def test_network_and_loss_pickle() -> None:
    import pickle

    module = build_network(CNN, seed=0)
    clone = pickle.loads(pickle.dumps(module))
    x = torch.randn(2, 1, 8, 8)
    torch.testing.assert_close(clone(x), module(x))
    assert pickle.loads(pickle.dumps(make_loss(CNN))).kind == "cross_entropy"


LSTM_NET = {
    "input_shape": [12, 3],
    "layers": [
        {"type": "lstm", "units": 8},
        {"type": "dense", "units": 4, "activation": "relu"},
        {"type": "output", "units": 3, "activation": "softmax", "loss": "cross_entropy"},
    ],
}
# sha256 (first 16 hex digits) of the initial state_dict (names and bytes, in order) that build_network gave before
# the trainer and the archive's loader shared one builder (commit 61c9d26): the same seed must keep giving the same
# weights, or resumed and compared runs drift. Random draws only, so the digests hold on any CPU.
GOLDEN_INITIAL_WEIGHTS = {
    ("digits-cnn", 0): "ae705ecbcaf01a97",
    ("digits-cnn", 7): "e5071f9b64497bc5",
    ("lstm", 0): "346be7f9f90a9325",
    ("lstm", 7): "bb4408b96c87771e",
}


@pytest.mark.parametrize(("network", "seed"), sorted(GOLDEN_INITIAL_WEIGHTS))
def test_a_seed_gives_the_weights_it_always_gave(network: str, seed: int) -> None:
    import hashlib
    from pathlib import Path

    if network == "lstm":
        spec = parse_network(LSTM_NET, input_shape=(12, 3))
    else:
        examples = Path(__file__).resolve().parents[4] / "examples"
        spec = parse_network(json.loads((examples / "digits-cnn.json").read_text())["network"], input_shape=(1, 8, 8))
    digest = hashlib.sha256()
    for name, value in build_network(spec, seed=seed).state_dict().items():
        digest.update(name.encode())
        digest.update(value.detach().cpu().contiguous().numpy().tobytes())
    assert digest.hexdigest()[:16] == GOLDEN_INITIAL_WEIGHTS[(network, seed)]
