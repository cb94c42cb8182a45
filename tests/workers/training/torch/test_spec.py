import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from workers.training.torch.spec import (
    AvgPool2dSpec,
    BatchNormSpec,
    Conv2dSpec,
    DenseSpec,
    DropoutSpec,
    FlattenSpec,
    GruSpec,
    LstmSpec,
    MaxPool2dSpec,
    NetworkSpec,
    OptimizerSpec,
    OutputSpec,
    ReshapeSpec,
    ScheduleSpec,
    SpecError,
    check_loss_for_task,
    check_optimizer_l2,
    parameter_count,
    parse_network,
    parse_optimizer,
    spec_to_dict,
)

OUT_MSE = {"type": "output", "units": 1, "activation": "identity", "loss": "mse"}
OUT_CE10 = {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}

MLP = {
    "input_shape": [64],
    "layers": [
        {"type": "dense", "units": 64, "activation": "relu"},
        {"type": "batch_norm"},
        {"type": "dropout", "rate": 0.2},
        {"type": "dense", "units": 32, "activation": "tanh", "bias": False},
        OUT_MSE,
    ],
    "l2": 1e-4,
}
CNN = {
    "input_shape": [1, 8, 8],
    "layers": [
        {"type": "conv2d", "filters": 8, "kernel_size": 3, "padding": 1, "activation": "relu"},
        {"type": "max_pool2d", "kernel_size": 2},
        {"type": "conv2d", "filters": 16, "kernel_size": [3, 3], "activation": "relu"},
        {"type": "flatten"},
        {"type": "dense", "units": 32, "activation": "relu"},
        OUT_CE10,
    ],
    "weight_init": "kaiming_uniform",
}
LSTM = {
    "input_shape": [12, 3],
    "layers": [
        {"type": "lstm", "units": 16, "return_sequences": True},
        {"type": "gru", "units": 8},
        {"type": "output", "units": 1, "activation": "sigmoid", "loss": "binary_cross_entropy"},
    ],
}


def net(*layers: dict[str, Any], input_shape: list[int] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"layers": list(layers)}
    if input_shape is not None:
        obj["input_shape"] = input_shape
    return obj


def error(obj: Any, **kwargs: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_network(obj, **kwargs)
    return info.value


# --- parsing --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layer", "input_shape", "expected", "shape"),
    [
        ({"type": "dense", "units": 5, "activation": "gelu"}, [4], DenseSpec(5, "gelu"), (5,)),
        (
            {"type": "dense", "units": 5, "activation": "elu", "bias": False},
            [4],
            DenseSpec(5, "elu", bias=False),
            (5,),
        ),
        (
            {"type": "conv2d", "filters": 4, "kernel_size": [3, 2], "stride": 2, "activation": "leaky_relu"},
            [2, 9, 9],
            Conv2dSpec(4, (3, 2), "leaky_relu", stride=(2, 2)),
            (4, 4, 4),
        ),
        (
            {"type": "conv2d", "filters": 4, "kernel_size": 4, "padding": "same", "activation": "relu"},
            [2, 9, 7],
            Conv2dSpec(4, (4, 4), "relu", padding="same"),
            (4, 9, 7),
        ),
        (
            {"type": "conv2d", "filters": 1, "kernel_size": 3, "padding": "valid", "activation": "relu"},
            [2, 5, 5],
            Conv2dSpec(1, (3, 3), "relu"),
            (1, 3, 3),
        ),
        ({"type": "max_pool2d", "kernel_size": 2}, [3, 9, 8], MaxPool2dSpec((2, 2), (2, 2)), (3, 4, 4)),
        (
            {"type": "avg_pool2d", "kernel_size": 3, "stride": [1, 2]},
            [3, 9, 8],
            AvgPool2dSpec((3, 3), (1, 2)),
            (3, 7, 3),
        ),
        ({"type": "batch_norm"}, [3, 4, 4], BatchNormSpec(), (3, 4, 4)),
        ({"type": "batch_norm"}, [7], BatchNormSpec(), (7,)),
        ({"type": "dropout", "rate": 0}, [3, 4, 4], DropoutSpec(0.0), (3, 4, 4)),
        ({"type": "flatten"}, [3, 4, 5], FlattenSpec(), (60,)),
        ({"type": "reshape", "shape": [2, 3]}, [6], ReshapeSpec((2, 3)), (2, 3)),
        ({"type": "lstm", "units": 6}, [5, 2], LstmSpec(6), (6,)),
        ({"type": "gru", "units": 6, "return_sequences": True}, [5, 2], GruSpec(6, True), (5, 6)),
    ],
)
def test_every_layer_type_parses_with_its_shape(
    layer: dict[str, Any], input_shape: list[int], expected: Any, shape: tuple[int, ...]
) -> None:
    flatten = [] if len(shape) == 1 else [{"type": "flatten"}]
    spec = parse_network(net(layer, *flatten, OUT_MSE, input_shape=input_shape))
    assert spec.layers[0] == expected
    assert spec.shapes[0] == shape
    assert parse_network(json.loads(json.dumps(spec_to_dict(spec)))) == spec


def test_examples_parse_with_shapes_loss_and_parameter_count() -> None:
    mlp = parse_network(MLP)
    assert mlp.shapes == ((64,), (64,), (64,), (32,), (1,))
    assert (mlp.loss, mlp.output_units, mlp.output_shape, mlp.l2) == ("mse", 1, (1,), 1e-4)
    assert mlp.weight_init == "xavier_uniform"
    assert parameter_count(mlp) == (64 * 64 + 64) + 2 * 64 + 64 * 32 + (32 + 1)

    cnn = parse_network(CNN)
    assert cnn.shapes == ((8, 8, 8), (8, 4, 4), (16, 2, 2), (64,), (32,), (10,))
    assert parameter_count(cnn) == (8 * 9 + 8) + (16 * 8 * 9 + 16) + (64 * 32 + 32) + (32 * 10 + 10)

    lstm = parse_network(LSTM)
    assert lstm.shapes == ((12, 16), (8,), (1,))
    assert lstm.is_recurrent and not cnn.is_recurrent
    assert parameter_count(lstm) == 4 * (3 * 16 + 16 * 16 + 32) + 3 * (16 * 8 + 8 * 8 + 16) + 9


def test_output_layer_parses() -> None:
    spec = parse_network(net(OUT_CE10, input_shape=[4]))
    assert spec.output == OutputSpec(10, "softmax", "cross_entropy")


def test_dataset_input_shape_is_used_when_network_has_none() -> None:
    spec = parse_network(net(OUT_MSE), input_shape=(64,))
    assert spec.input_shape == (64,)


def test_declared_input_shape_wins_when_it_holds_the_same_values() -> None:
    assert parse_network(CNN, input_shape=(64,)).input_shape == (1, 8, 8)
    e = error(CNN, input_shape=(32,))
    assert e.path == "network.input_shape"
    assert "(1, 8, 8) holds 64 values" in e.message and "(32,)" in e.message


def test_input_shape_required_and_validated() -> None:
    assert error(net(OUT_MSE)).path == "network.input_shape"
    e = error(net(OUT_MSE, input_shape=[1, 2, 3, 4]))
    assert "1 to 3 positive integers" in str(e)
    assert error(net(OUT_MSE, input_shape=[0])).path == "network.input_shape"
    assert error(net(OUT_MSE, input_shape=[True])).path == "network.input_shape"


def test_null_means_default() -> None:
    spec = parse_network({"input_shape": [3], "layers": [OUT_MSE], "weight_init": None, "l2": None}, input_shape=None)
    assert (spec.weight_init, spec.l2) == ("xavier_uniform", 0.0)


# --- parse errors ---------------------------------------------------------------------------------


def test_error_message_format_names_the_field() -> None:
    layers = [
        {"type": "dense", "units": 4, "activation": "relu"},
        {"type": "dense", "units": 4, "activation": "relu"},
        {"type": "conv2d", "filters": 2, "kernel_size": -1, "activation": "relu"},
    ]
    e = error(net(*layers, input_shape=[4]))
    assert e.path == "network.layers[2].kernel_size"
    assert str(e) == "network.layers[2].kernel_size: must be a positive integer or a pair, got -1"


def test_unknown_layer_type_lists_the_known_ones() -> None:
    e = error(net({"type": "convolution", "filters": 3}, OUT_MSE, input_shape=[4]))
    assert e.path == "network.layers[0].type"
    assert '"convolution"' in e.message
    for known in ("avg_pool2d", "batch_norm", "conv2d", "dense", "dropout", "flatten", "gru", "lstm"):
        assert known in e.message
    assert error(net({"units": 3}, input_shape=[4])).message.startswith("missing; known:")
    assert error(net({"type": ["dense"]}, input_shape=[4])).message.startswith('unknown layer type ["dense"]')
    e = error(net(OUT_MSE, {"type": "flatten"}, input_shape=[2]))
    assert e.message.endswith("but 1 layer follows it")


def test_unknown_keys_are_named_with_the_allowed_ones() -> None:
    e = error(net({"type": "dense", "units": 3, "activation": "relu", "unit": 3, "act": 1}, input_shape=[4]))
    assert e.path == "network.layers[0]"
    assert e.message == ("unknown keys 'act', 'unit' for a dense layer; allowed: activation, bias, type, units")
    assert error({"layers": [OUT_MSE], "input_shape": [2], "lr": 1}).path == "network"
    # DL4J sets weight init and l2 per layer; here they are the network's, and the error says so
    e = error(net({"type": "dense", "units": 3, "activation": "relu", "weight_init": "xavier_normal", "l2": 1e-4},
                  input_shape=[4]))  # fmt: skip
    assert e.message == ("unknown keys 'l2', 'weight_init' for a dense layer; allowed: activation, bias, type, units "
                         "(l2 and weight_init apply to the whole network: set network.l2)")  # fmt: skip


@pytest.mark.parametrize(
    ("layer", "path", "fragment"),
    [
        ({"type": "dense", "units": "8", "activation": "relu"}, "units", 'must be a positive integer, got "8"'),
        ({"type": "dense", "units": 8.0, "activation": "relu"}, "units", "got 8.0"),
        ({"type": "dense", "units": True, "activation": "relu"}, "units", "got true"),
        ({"type": "dense", "units": 0, "activation": "relu"}, "units", "got 0"),
        ({"type": "dense", "units": 8, "activation": "relu", "bias": 1}, "bias", "must be true or false"),
        ({"type": "dense", "units": 8, "activation": "rellu"}, "activation", 'unknown activation "rellu"'),
        ({"type": "dense", "units": 8}, "activation", "is required"),
        ({"type": "dropout"}, "rate", "is required"),
        ({"type": "dropout", "rate": 1}, "rate", "must be a number in [0, 1), got 1"),
        ({"type": "dropout", "rate": -0.1}, "rate", "got -0.1"),
        ({"type": "lstm", "units": 4, "return_sequences": "yes"}, "return_sequences", "true or false"),
        ({"type": "reshape", "shape": [0, 2]}, "shape", "positive integers"),
        ({"type": "output", "units": 2, "activation": "softmax"}, "loss", "is required"),
        ({"type": "output", "units": 2, "activation": "softmax", "loss": "nll"}, "loss", "known: mse, mae"),
    ],
)
def test_wrong_types_and_missing_fields(layer: dict[str, Any], path: str, fragment: str) -> None:
    e = error(net(layer, OUT_MSE, input_shape=[4]))
    assert e.path == f"network.layers[0].{path}"
    assert fragment in e.message


@pytest.mark.parametrize(
    ("changes", "path", "fragment"),
    [
        ({"kernel_size": [3, 0]}, "kernel_size", "positive integer or a pair, got [3, 0]"),
        ({"kernel_size": [3, 3, 3]}, "kernel_size", "or a pair"),
        ({"stride": 0}, "stride", "got 0"),
        ({"padding": -1}, "padding", "non-negative integer, a pair, 'same' or 'valid', got -1"),
        ({"padding": "full"}, "padding", 'got "full"'),
        ({"padding": "same", "stride": 2}, "padding", "'same' needs stride 1"),
        ({"activation": "softmax"}, "activation", "softmax is only allowed on dense and output layers"),
        ({"filters": None}, "filters", "is required"),
    ],
)
def test_conv2d_field_errors(changes: dict[str, Any], path: str, fragment: str) -> None:
    layer = {"type": "conv2d", "filters": 2, "kernel_size": 3, "activation": "relu", **changes}
    e = error(net(layer, {"type": "flatten"}, OUT_MSE, input_shape=[1, 8, 8]))
    assert e.path == f"network.layers[0].{path}"
    assert fragment in e.message


def test_network_level_field_errors() -> None:
    assert error({"input_shape": [2], "layers": []}).path == "network.layers"
    assert error({"input_shape": [2], "layers": {"type": "output"}}).path == "network.layers"
    assert error([1, 2]).message == "must be an object, got [1, 2]"
    e = error({"input_shape": [2], "layers": [OUT_MSE], "weight_init": "he"})
    assert e.path == "network.weight_init" and "xavier_uniform" in e.message
    e = error({"input_shape": [2], "layers": [OUT_MSE], "l2": -1})
    assert e.path == "network.l2" and "must be a number >= 0" in e.message
    e = error({"input_shape": [2], "layers": [OUT_MSE], "l2": float("nan")})
    assert e.path == "network.l2"
    assert error({"input_shape": [2], "layers": ["dense"]}).path == "network.layers[0]"


def test_output_layer_missing() -> None:
    e = error(net({"type": "dense", "units": 3, "activation": "relu"}, input_shape=[2]))
    assert e.path == "network.layers"
    assert "there is no output layer" in e.message


def test_output_layer_not_last() -> None:
    e = error(net(OUT_MSE, {"type": "dropout", "rate": 0.1}, {"type": "flatten"}, input_shape=[2]))
    assert e.path == "network.layers[0]"
    assert "must be the last layer, but 2 layers follow it" in e.message


def test_more_than_one_output_layer() -> None:
    e = error(net(OUT_MSE, {"type": "dense", "units": 2, "activation": "relu"}, OUT_MSE, input_shape=[2]))
    assert e.path == "network.layers[2]"
    assert "more than one output layer (the first is layers[0])" in e.message


def test_output_activation_must_suit_a_logit_loss() -> None:
    bad = {"type": "output", "units": 3, "activation": "sigmoid", "loss": "cross_entropy"}
    e = error(net(bad, input_shape=[2]))
    assert e.path == "network.layers[0].activation"
    assert "cross_entropy takes logits: use activation softmax or identity" in e.message
    bad = {"type": "output", "units": 1, "activation": "softmax", "loss": "binary_cross_entropy"}
    assert "use activation sigmoid or identity" in error(net(bad, input_shape=[2])).message
    one = {"type": "output", "units": 1, "activation": "softmax", "loss": "cross_entropy"}
    one_unit = error(net(one, input_shape=[2]))
    assert one_unit.path == "network.layers[0].units"
    assert "classification loss" in one_unit.message and "a regression takes mse or mae" in one_unit.message
    # regression outputs may use any activation
    reg = {"type": "output", "units": 2, "activation": "softmax", "loss": "mae"}
    assert parse_network(net(reg, input_shape=[2])).output.activation == "softmax"


# --- shape errors ---------------------------------------------------------------------------------


def test_conv_after_dense_names_both_layers_and_shapes() -> None:
    e = error(
        net(
            {"type": "dense", "units": 64, "activation": "relu"},
            {"type": "dropout", "rate": 0.5},
            {"type": "dense", "units": 128, "activation": "relu"},
            {"type": "conv2d", "filters": 4, "kernel_size": 3, "activation": "relu"},
            OUT_MSE,
            input_shape=[10],
        )
    )
    assert e.path == "network.layers[3]"
    assert str(e) == (
        "network.layers[3]: conv2d expects input (channels, height, width), got (128,) from layers[2] "
        '(dense); add {"type": "reshape", "shape": [channels, height, width]} or use dense'
    )


def test_dense_on_multi_dimensional_input_needs_flatten() -> None:
    e = error(
        net(
            {"type": "conv2d", "filters": 16, "kernel_size": 3, "padding": 1, "activation": "relu"},
            {"type": "max_pool2d", "kernel_size": 2},
            {"type": "dense", "units": 10, "activation": "relu"},
            OUT_MSE,
            input_shape=[1, 8, 8],
        )
    )
    assert e.path == "network.layers[2]"
    assert "dense expects input (features,), got (16, 4, 4) from layers[1] (max_pool2d)" in e.message
    assert '{"type": "flatten"}' in e.message
    e = error(net(OUT_MSE, input_shape=[12, 3]))
    assert e.path == "network.layers[0]"
    assert "output expects input (features,), got (12, 3) from the input" in e.message


def test_conv_shrinking_below_one_reports_the_numbers() -> None:
    e = error(
        net(
            {"type": "conv2d", "filters": 4, "kernel_size": 3, "activation": "relu"},
            {"type": "conv2d", "filters": 4, "kernel_size": 5, "activation": "relu"},
            {"type": "flatten"},
            OUT_MSE,
            input_shape=[1, 5, 5],
        )
    )
    assert e.path == "network.layers[1]"
    assert (
        "conv2d kernel 5x5 (stride 1x1, padding 0x0) does not fit the 3x3 input (4, 3, 3) from layers[0] "
        "(conv2d): output would be -1x-1" in e.message
    )


def test_pool_shrinking_below_one() -> None:
    e = error(net({"type": "avg_pool2d", "kernel_size": [1, 4]}, {"type": "flatten"}, OUT_MSE, input_shape=[2, 5, 3]))
    assert e.path == "network.layers[0]"
    assert "avg_pool2d kernel 1x4" in e.message
    assert "the 5x3 input (2, 5, 3) from the input: output would be 5x0" in e.message


def test_recurrent_needs_time_and_features() -> None:
    e = error(net({"type": "gru", "units": 4}, OUT_MSE, input_shape=[64]))
    assert e.path == "network.layers[0]"
    assert "gru expects input (time, features), got (64,) from the input" in e.message
    # rows that are the steps of sequences want dataset.sequence: input_shape [1, 3] trained each row alone
    assert "declare dataset.sequence" in e.message
    e = error(net({"type": "lstm", "units": 4}, {"type": "lstm", "units": 4}, OUT_MSE, input_shape=[5, 2]))
    assert e.path == "network.layers[1]"
    assert "got (4,) from layers[0] (lstm)" in e.message


def test_batch_norm_rejects_sequences_and_reshape_checks_sizes() -> None:
    e = error(net({"type": "batch_norm"}, {"type": "flatten"}, OUT_MSE, input_shape=[5, 2]))
    assert "batch_norm expects input (features,) or (channels, height, width), got (5, 2)" in e.message
    e = error(net({"type": "reshape", "shape": [2, 4]}, {"type": "flatten"}, OUT_MSE, input_shape=[6]))
    assert e.path == "network.layers[0]"
    assert "reshape cannot turn (6,) (6 values) from the input into (2, 4) (8 values)" in e.message


def test_reshape_lets_flat_features_feed_a_conv() -> None:
    spec = parse_network(
        net(
            {"type": "dense", "units": 16, "activation": "relu"},
            {"type": "reshape", "shape": [1, 4, 4]},
            {"type": "conv2d", "filters": 2, "kernel_size": 2, "activation": "relu"},
            {"type": "flatten"},
            OUT_MSE,
            input_shape=[3],
        )
    )
    assert spec.shapes[2] == (2, 3, 3)


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(SpecError, match="no output layer"):
        NetworkSpec(input_shape=(3,), layers=(DenseSpec(2, "relu"),))
    with pytest.raises(SpecError, match="conv2d expects input"):
        NetworkSpec(input_shape=(3,), layers=(Conv2dSpec(2, (1, 1), "relu"), OutputSpec(1, "identity", "mse")))


def test_spec_error_pickles() -> None:
    e = pickle.loads(pickle.dumps(SpecError("network.l2", "must be a number >= 0, got -1")))
    assert (e.path, e.message, str(e)) == (
        "network.l2",
        "must be a number >= 0, got -1",
        "network.l2: must be a number >= 0, got -1",
    )


# --- loss vs task ---------------------------------------------------------------------------------


def out(units: int, activation: str, loss: str) -> NetworkSpec:
    return parse_network(
        net({"type": "output", "units": units, "activation": activation, "loss": loss}, input_shape=[4])
    )


def task_error(spec: NetworkSpec, task: str, num_classes: int | None, label_width: int) -> SpecError:
    with pytest.raises(SpecError) as info:
        check_loss_for_task(spec, task, num_classes, label_width)
    return info.value


def test_valid_loss_task_combinations() -> None:
    check_loss_for_task(out(5, "softmax", "cross_entropy"), "classification", 5, 1)
    check_loss_for_task(out(2, "identity", "cross_entropy"), "classification", 2, 1)
    check_loss_for_task(out(1, "sigmoid", "binary_cross_entropy"), "classification", 2, 1)
    check_loss_for_task(out(1, "identity", "binary_cross_entropy"), "classification", 2, 1)
    check_loss_for_task(out(3, "identity", "mse"), "regression", None, 3)
    check_loss_for_task(out(1, "relu", "mae"), "regression", None, 1)


def test_cross_entropy_units_must_match_classes() -> None:
    e = task_error(out(3, "softmax", "cross_entropy"), "classification", 5, 1)
    assert e.path == "network.layers[0].units"
    assert "the dataset has 5 classes, the output layer has 3 units; set units to 5" in e.message


def test_logit_losses_need_classification() -> None:
    e = task_error(out(3, "softmax", "cross_entropy"), "regression", None, 3)
    assert e.path == "network.layers[0].loss"
    assert "cross_entropy needs a classification task, the task is regression; use mse or mae" in e.message
    e = task_error(out(1, "sigmoid", "binary_cross_entropy"), "classification", None, 1)
    assert "needs at least 2 classes" in e.message


def test_binary_cross_entropy_needs_two_classes_and_one_unit() -> None:
    e = task_error(out(1, "sigmoid", "binary_cross_entropy"), "classification", 4, 1)
    assert e.path == "network.layers[0].loss"
    assert 'the dataset has 4; use "loss": "cross_entropy" with units 4' in e.message
    e = task_error(out(2, "sigmoid", "binary_cross_entropy"), "classification", 2, 1)
    assert e.path == "network.layers[0].units"
    assert "needs 1 output unit" in e.message and "cross_entropy with units 2" in e.message


def test_regression_losses_need_regression_and_label_width() -> None:
    e = task_error(out(3, "identity", "mse"), "classification", 3, 1)
    assert e.path == "network.layers[0].loss"
    assert "mse needs a regression task" in e.message and "cross_entropy with units 3" in e.message
    e = task_error(out(1, "identity", "mae"), "regression", None, 2)
    assert e.path == "network.layers[0].units"
    assert "the labels have 2 columns, the output layer has 1 units; set units to 2" in e.message
    assert task_error(out(1, "identity", "mae"), "ranking", None, 1).path == "task"


# --- optimizer ------------------------------------------------------------------------------------


def test_optimizer_defaults() -> None:
    assert parse_optimizer({"type": "sgd", "learning_rate": 0.1}) == OptimizerSpec("sgd", 0.1)
    adam = parse_optimizer({"type": "adam", "learning_rate": 1e-3})
    assert (adam.betas, adam.eps, adam.weight_decay, adam.schedule) == ((0.9, 0.999), 1e-8, 0.0, None)
    assert parse_optimizer({"type": "adamw", "learning_rate": 1e-3}).weight_decay == 0.01
    rms = parse_optimizer({"type": "rmsprop", "learning_rate": 1e-2})
    assert (rms.alpha, rms.momentum, rms.eps) == (0.99, 0.0, 1e-8)


def test_optimizer_with_all_fields_round_trips() -> None:
    objs = [
        {"type": "sgd", "learning_rate": 0.1, "momentum": 0.9, "nesterov": True, "warmup_steps": 5},
        {"type": "adam", "learning_rate": 1e-3, "betas": [0.8, 0.99], "eps": 1e-6,
         "schedule": {"type": "step", "step_size": 100, "gamma": 0.5}},
        {"type": "adamw", "learning_rate": 1e-3, "weight_decay": 0.05, "warmup_steps": 10,
         "schedule": {"type": "cosine", "t_max": 1000, "min_lr": 1e-5}},
        {"type": "rmsprop", "learning_rate": 1e-2, "alpha": 0.9, "momentum": 0.5, "eps": 1e-7,
         "schedule": {"type": "exponential", "gamma": 0.999}},
    ]  # fmt: skip
    for obj in objs:
        spec = parse_optimizer(obj)
        as_dict = spec_to_dict(spec)
        assert {k: v for k, v in as_dict.items() if k in obj} == obj
        assert parse_optimizer(json.loads(json.dumps(as_dict))) == spec
    assert parse_optimizer(objs[1]).schedule == ScheduleSpec("step", step_size=100, gamma=0.5)
    cosine = parse_optimizer({"type": "sgd", "learning_rate": 1, "schedule": {"type": "cosine", "t_max": 9}})
    assert cosine.schedule == ScheduleSpec("cosine", t_max=9, min_lr=0.0)
    step = parse_optimizer({"type": "sgd", "learning_rate": 1, "schedule": {"type": "step", "step_size": 3}})
    assert step.schedule is not None and step.schedule.gamma == 0.1


@pytest.mark.parametrize(
    ("obj", "path", "fragment"),
    [
        ({"learning_rate": 1}, "training.optimizer.type", "missing; known: sgd, adam, adamw, rmsprop"),
        ({"type": "lbfgs", "learning_rate": 1}, "training.optimizer.type", 'unknown optimizer "lbfgs"'),
        ({"type": "sgd"}, "training.optimizer.learning_rate", "is required"),
        ({"type": "sgd", "learning_rate": 0}, "training.optimizer.learning_rate", "must be a positive number"),
        (
            {"type": "sgd", "learning_rate": 0.1, "betas": [0.9, 0.9]},
            "training.optimizer",
            "unknown key 'betas' for the sgd optimizer; allowed: learning_rate, momentum, nesterov, schedule, "
            "type, warmup_steps",
        ),
        ({"type": "sgd", "learning_rate": 0.1, "nesterov": True}, "training.optimizer.nesterov", "needs momentum > 0"),
        ({"type": "sgd", "learning_rate": 0.1, "momentum": 1}, "training.optimizer.momentum", "in [0, 1)"),
        ({"type": "adam", "learning_rate": 0.1, "betas": [0.9]}, "training.optimizer.betas", "two numbers"),
        ({"type": "adam", "learning_rate": 0.1, "eps": 0}, "training.optimizer.eps", "positive number"),
        ({"type": "adamw", "learning_rate": 0.1, "weight_decay": -1}, "training.optimizer.weight_decay", ">= 0"),
        ({"type": "rmsprop", "learning_rate": 0.1, "alpha": 1}, "training.optimizer.alpha", "in (0, 1)"),
        ({"type": "adam", "learning_rate": 0.1, "warmup_steps": -1}, "training.optimizer.warmup_steps", ">= 0"),
        (
            {"type": "adam", "learning_rate": 0.1, "schedule": {"type": "linear"}},
            "training.optimizer.schedule.type",
            'unknown schedule "linear"; known: step, exponential, cosine',
        ),
        (
            {"type": "adam", "learning_rate": 0.1, "schedule": {"type": "step", "gamma": 0.5}},
            "training.optimizer.schedule.step_size",
            "is required",
        ),
        (
            {"type": "adam", "learning_rate": 0.1, "schedule": {"type": "exponential", "gamma": 1.5}},
            "training.optimizer.schedule.gamma",
            "in (0, 1]",
        ),
        (
            {"type": "adam", "learning_rate": 0.1, "schedule": {"type": "cosine", "t_max": 5, "gamma": 0.5}},
            "training.optimizer.schedule",
            "unknown key 'gamma' for the cosine schedule; allowed: min_lr, t_max, type",
        ),
        (
            {"type": "adam", "learning_rate": 0.1, "schedule": {"type": "cosine", "t_max": 5, "min_lr": 0.2}},
            "training.optimizer.schedule.min_lr",
            "must not exceed learning_rate 0.1",
        ),
        ({"type": "adam", "learning_rate": 0.1, "schedule": 3}, "training.optimizer.schedule", "must be an object"),
    ],
)
def test_optimizer_errors(obj: dict[str, Any], path: str, fragment: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_optimizer(obj)
    assert info.value.path == path
    assert fragment in info.value.message


def test_adamw_weight_decay_and_l2_are_exclusive() -> None:
    adamw = parse_optimizer({"type": "adamw", "learning_rate": 1e-3})
    check_optimizer_l2(adamw, 0.0)
    with pytest.raises(SpecError, match="set one of them to 0") as info:
        check_optimizer_l2(adamw, 1e-4)
    assert info.value.path == "training.optimizer.weight_decay"
    check_optimizer_l2(parse_optimizer({"type": "adamw", "learning_rate": 1e-3, "weight_decay": 0}), 1e-4)
    check_optimizer_l2(parse_optimizer({"type": "adam", "learning_rate": 1e-3}), 1e-4)


# --- round trip and purity ------------------------------------------------------------------------


def test_network_round_trips_through_json() -> None:
    for obj in (MLP, CNN, LSTM):
        spec = parse_network(obj)
        as_dict = spec_to_dict(spec)
        assert parse_network(json.loads(json.dumps(as_dict))) == spec
        assert spec_to_dict(parse_network(as_dict)) == as_dict
    assert spec_to_dict(parse_network(CNN))["layers"][1] == {
        "type": "max_pool2d",
        "kernel_size": [2, 2],
        "stride": [2, 2],
    }


def test_spec_module_does_not_import_heavy_dependencies() -> None:
    code = (
        "import sys, workers.training.torch.spec\n"
        "bad = {'torch', 'numpy', 'pydantic', 'app', 'sqlalchemy', 'fastapi', 'celery', 'pyspark'} & set(sys.modules)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[4])


def test_a_network_that_differs_from_a_checkpoints_is_located() -> None:
    """A resume with other features said "the checkpoint was trained with a different network; post the same
    network" about a network posted unchanged (walkthrough): each difference is named where it is."""
    from workers.training.torch.spec import network_difference, parse_network, spec_to_dict

    def net(width: int, units: int = 64, activation: str = "relu", l2: float = 0.0) -> dict[str, Any]:
        layers = [{"type": "dense", "units": units, "activation": activation},
                  {"type": "output", "units": 1, "activation": "identity", "loss": "mse"}]  # fmt: skip
        return spec_to_dict(parse_network({"layers": layers, "l2": l2}, input_shape=(width,)))

    where, what = network_difference(net(7), net(6))
    assert where == "dataset.features" and "shape [7]" in what and "gives [6]" in what, what
    assert "the same features (and categories)" in what
    # a shape declared in the request is named where it was declared (review)
    where, what = network_difference(net(7), net(6), "network.input_shape")
    assert where == "network.input_shape" and what.endswith("train with the same network.input_shape as the checkpoint")
    assert network_difference(net(7), net(7, units=32)) == (
        "network.layers[0].units",
        "the checkpoint has 64, this request 32",
    )
    assert network_difference(net(7), net(7, activation="tanh"))[1] == 'the checkpoint has "relu", this request "tanh"'
    assert network_difference(net(7), net(7, l2=0.1))[0] == "network.l2"
