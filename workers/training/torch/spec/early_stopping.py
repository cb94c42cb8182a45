"""``training.early_stopping``: when a torch job stops before its last epoch (DL4J's ``EarlyStoppingTrainer``).

* ``metric``: a validation metric the job computes after every epoch: ``val_loss`` (every job), ``val_accuracy``
  (classification) or ``val_rmse`` (regression). Default ``val_loss``.
* ``mode``: ``min`` or ``max``; by default ``max`` for ``val_accuracy``, else ``min``.
* ``patience``: stop after this many epochs in a row without an improvement (default 5).
* ``min_delta``: an improvement beats the best score by more than this (default 0).
* ``max_minutes``: stop after the first epoch that ends past this much training time (resumed runs included).
* ``restore_best``: register the best epoch's weights, not the last one's (default true).

Parsed into plain JSON (every default spelled out), which the plan, the trainer's config and the checkpoints carry.
The trainer's side is :mod:`workers.training.torch.early_stopping`.

No third-party imports, like the whole package: the API process imports it (see :mod:`workers.training.torch.spec`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workers.errors import SpecError
from workers.training.torch.spec.reader import _Obj

METRICS = {"val_loss": "min", "val_accuracy": "max", "val_rmse": "min"}
"""Every validation metric a torch job can compute, with the direction that is better."""
TASK_METRICS = {"classification": ("val_loss", "val_accuracy"), "regression": ("val_loss", "val_rmse")}
"""What a job of each task computes after every epoch (on its validation set, or the held-out fraction)."""
KEYS = ("metric", "mode", "patience", "min_delta", "max_minutes", "restore_best")
PATH = "training.early_stopping"


def parse_early_stopping(value: Mapping[str, Any] | None, task: str) -> dict[str, Any] | None:
    """The checked settings with every default spelled out, or None without ``training.early_stopping``.
    A metric the job does not compute (the other task's, or an unknown name) names the ones it does."""
    if value is None:
        return None
    obj = _Obj(value, PATH, KEYS, "early stopping")
    computed = TASK_METRICS.get(task, ("val_loss",))
    metric = obj.raw("metric", "val_loss")
    if metric not in computed:
        raise SpecError(
            obj.at("metric"),
            f"a {task} job computes {', '.join(computed)} after every epoch (on its validation data), not {metric!r}",
        )
    mode = obj.choice("mode", ("min", "max"), "mode", METRICS[metric])
    patience = obj.integer("patience", 5)
    min_delta = obj.number("min_delta", 0.0, low=0.0)
    max_minutes = obj.number("max_minutes", low=0.0, low_open=True) if obj.has("max_minutes") else None
    return {
        "metric": metric,
        "mode": mode,
        "patience": patience,
        "min_delta": min_delta,
        "max_minutes": max_minutes,
        "restore_best": obj.flag("restore_best", True),
    }
