"""The network and optimizer a user posts: parsed, validated and shape-checked in pure Python.

The API process imports this package to reject a bad request before any job runs, so it must not
import torch (or numpy, pydantic, ...). :mod:`workers.training.torch.network` and
:mod:`workers.training.torch.optim` turn these specs into torch objects on the executors.

Parse functions are the only validating constructors; ``parse_network(spec_to_dict(s)) == s``.

Every public name is re-exported here (import from ``workers.training.torch.spec``); one module per concern,
each with the choices the JSON contract leaves open in its part:

* :mod:`~workers.training.torch.spec.reader`: reading JSON objects, numbers, pairs and shapes; every error
  names the exact field.
* :mod:`~workers.training.torch.spec.layers`: the layer specs and the parsing of ``network.layers`` entries
  (logit losses, the extra ``reshape`` layer).
* :mod:`~workers.training.torch.spec.shapes`: shape inference through the layers (no auto-flattening).
* :mod:`~workers.training.torch.spec.network`: :class:`NetworkSpec`, :func:`parse_network`,
  :func:`parameter_count` and :func:`check_loss_for_task`.
* :mod:`~workers.training.torch.spec.optimizer`: the optimizer and learning-rate schedule
  (:func:`parse_optimizer`, ``network.l2`` as weight decay, schedules counted in steps).
* :mod:`~workers.training.torch.spec.serialize`: :func:`spec_to_dict`, the JSON round trip.
* :mod:`~workers.training.torch.spec.early_stopping`: ``training.early_stopping`` (:func:`parse_early_stopping`).
"""

from __future__ import annotations

from workers.errors import SpecError
from workers.training.torch.spec.early_stopping import parse_early_stopping
from workers.training.torch.spec.layers import (
    ACTIVATIONS,
    LAYER_TYPES,
    LOSSES,
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
    OutputSpec,
    Pool2dSpec,
    RecurrentSpec,
    ReshapeSpec,
)
from workers.training.torch.spec.network import (
    TASKS,
    WEIGHT_INITS,
    NetworkSpec,
    check_loss_for_task,
    parameter_count,
    parse_network,
)
from workers.training.torch.spec.optimizer import (
    OPTIMIZERS,
    SCHEDULES,
    OptimizerSpec,
    ScheduleSpec,
    check_optimizer_l2,
    parse_optimizer,
)
from workers.training.torch.spec.reader import Pair, Shape
from workers.training.torch.spec.serialize import network_difference, spec_to_dict

__all__ = [
    "ACTIVATIONS",
    "LAYER_TYPES",
    "LOSSES",
    "OPTIMIZERS",
    "SCHEDULES",
    "TASKS",
    "WEIGHT_INITS",
    "AvgPool2dSpec",
    "BatchNormSpec",
    "Conv2dSpec",
    "DenseSpec",
    "DropoutSpec",
    "FlattenSpec",
    "GruSpec",
    "LayerSpec",
    "LstmSpec",
    "MaxPool2dSpec",
    "NetworkSpec",
    "OptimizerSpec",
    "OutputSpec",
    "Pair",
    "Pool2dSpec",
    "RecurrentSpec",
    "ReshapeSpec",
    "ScheduleSpec",
    "Shape",
    "SpecError",
    "check_loss_for_task",
    "check_optimizer_l2",
    "network_difference",
    "parameter_count",
    "parse_early_stopping",
    "parse_network",
    "parse_optimizer",
    "spec_to_dict",
]
