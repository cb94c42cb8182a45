"""Starting a network from a saved model's weights (``training.init_from``, workers/training/torch/warm_start.py):
which tensors match, by name and shape, and the copy that leaves the others as the seeded build made them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from workers.training.torch import warm_start
from workers.training.torch.checkpoint import save_weights
from workers.training.torch.network import build_network
from workers.training.torch.spec import parse_network, spec_to_dict


def _network(*layers: dict[str, Any], input_shape: tuple[int, ...] = (64,)) -> dict[str, Any]:
    return spec_to_dict(parse_network({"layers": list(layers)}, input_shape=input_shape))


DENSE = {"type": "dense", "units": 16, "activation": "relu"}
NORM = {"type": "batch_norm"}
OUT10 = {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}
OUT3 = {"type": "output", "units": 3, "activation": "softmax", "loss": "cross_entropy"}


def _saved(tmp_path: Path, network: dict[str, Any], seed: int = 1) -> tuple[Path, torch.nn.Module]:
    model = build_network(parse_network(network), seed=seed)
    with torch.no_grad():  # buffers too: batch norm's running statistics are part of what a model learned
        for buffer in model.buffers():
            if buffer.is_floating_point():
                buffer.add_(0.25)
    save_weights(tmp_path, model)
    return tmp_path, model


def test_the_header_and_the_meta_build_name_the_same_tensors_with_the_same_shapes(tmp_path: Path) -> None:
    network = _network(DENSE, NORM, OUT10)
    directory, model = _saved(tmp_path, network)
    expected = {name: tuple(t.shape) for name, t in [*model.named_parameters(), *model.named_buffers()]}
    assert warm_start.saved_shapes(directory) == expected == warm_start.network_shapes(network)


def test_strict_needs_every_tensor_and_says_which_differs(tmp_path: Path) -> None:
    saved = warm_start.network_shapes(_network(DENSE, OUT10))
    assert warm_start.match(saved, saved, strict=True) == ()
    other = warm_start.network_shapes(_network(DENSE, OUT3))
    with pytest.raises(
        ValueError, match=r"has shape \[10, 16\] for layers.1.linear.weight \(the network needs \[3, 16\]\)"
    ):
        warm_start.match(saved, other, strict=True)
    assert warm_start.match(saved, other, strict=False) == ("layers.1.linear.weight", "layers.1.linear.bias")
    wider = warm_start.network_shapes(_network({**DENSE, "units": 8}, OUT3))
    with pytest.raises(ValueError, match="no tensor of the network matches"):
        warm_start.match(saved, wider, strict=False)


def test_the_copy_fills_the_matching_tensors_and_leaves_the_fresh_ones_seeded(tmp_path: Path) -> None:
    directory, source = _saved(tmp_path, _network(DENSE, NORM, OUT10), seed=1)
    target_network = _network(DENSE, NORM, OUT3)
    fresh = warm_start.match(warm_start.saved_shapes(directory), warm_start.network_shapes(target_network),
                             strict=False)  # fmt: skip
    target = build_network(parse_network(target_network), seed=2)
    seeded = {name: t.detach().clone() for name, t in target.state_dict().items()}
    copied = warm_start.load(directory, target, fresh)
    got, was = target.state_dict(), source.state_dict()
    assert copied == len(got) - len(fresh) and set(fresh) == {"layers.2.linear.weight", "layers.2.linear.bias"}
    for name, tensor in got.items():
        assert torch.equal(tensor, seeded[name] if name in fresh else was[name]), name
    assert not torch.equal(
        seeded["layers.0.linear.weight"], was["layers.0.linear.weight"]
    )  # the seeds differ: a real copy
