"""Starting a network from a registered model version's weights (``training.init_from``; fine-tuning, DL4J's
TransferLearning): which tensors of the new network the model's ``weights.safetensors`` can fill, decided once when
the request is planned, and the copy into the freshly built network on every rank (all read the same file, so the
replicas start equal).

Tensors are matched by name and shape: sparktrain names a network's tensors by layer position
(``layers.<i>.linear.weight``), so the same layers in the same order match, and a changed output layer does not.
Executor-side: torch and safetensors only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from workers.training.torch import checkpoint as ckpt
from workers.training.torch.checkpoint import WEIGHTS

Shapes = dict[str, tuple[int, ...]]


def saved_shapes(directory: str | Path) -> Shapes:
    """Name -> shape of every tensor in a model directory's weights, read from the file's header only."""
    from safetensors import safe_open

    with safe_open(str(Path(directory) / WEIGHTS), framework="pt") as f:
        return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}  # noqa: SIM118 (not a dict)


def network_shapes(network: dict[str, Any]) -> Shapes:
    """Name -> shape of every parameter and buffer of the network a plan's ``network`` builds (on the meta device:
    no memory, no weights)."""
    from workers.inference.standalone import Network

    with torch.device("meta"):
        module = Network(network)
    return {name: tuple(t.shape) for name, t in [*module.named_parameters(), *module.named_buffers()]}


def match(saved: Shapes, wanted: Shapes, *, strict: bool) -> tuple[str, ...]:
    """The tensors of the new network that keep their fresh initialization (none when ``strict``). Raises
    ValueError saying which tensor does not match, or that none does."""
    fresh = tuple(name for name, shape in wanted.items() if saved.get(name) != shape)
    if strict and fresh:
        name = fresh[0]
        has = f"has shape {list(saved[name])}" if name in saved else "has no such tensor"
        raise ValueError(
            f"the model {has} for {name} (the network needs {list(wanted[name])}), and {len(fresh)} of "
            f"{len(wanted)} tensors differ: post the model's network, or set strict to false to start those fresh"
        )
    if len(fresh) == len(wanted):
        raise ValueError("no tensor of the network matches the model's by name and shape: it is another network")
    return fresh


def load(directory: str | Path, model: torch.nn.Module, fresh: tuple[str, ...]) -> int:
    """Copy the saved tensors into ``model``'s (built and seeded as usual), except ``fresh``; returns how many."""
    return ckpt.load_weights(directory, model, skip=fresh)
