"""Groups of states, named as in a request's ``metrics`` list: ``"classification"`` (:class:`ClassificationState`),
``"roc"`` (:class:`RocState`) and ``"regression"`` (:class:`RegressionState`). :func:`make_states` builds a
group -> state dict for a request, :func:`update_states` feeds it a batch, :func:`merge_states` reduces the
partitions' dicts (states or their ``to_dict()`` forms or JSON strings), :func:`results` finishes.

Only stdlib and numpy are imported: this module runs inside Spark executors.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy.typing as npt

from workers.evaluation.base import MetricState
from workers.evaluation.classification import DEFAULT_TOP_K, ClassificationState
from workers.evaluation.regression import RegressionState
from workers.evaluation.roc import DEFAULT_ROC_THRESHOLD_STEPS, RocState

GROUPS = ("classification", "roc", "regression")
"""Metric group names accepted in a request's ``metrics`` list."""

_STATE_TYPES: dict[str, type[MetricState]] = {
    "classification": ClassificationState,
    "roc": RocState,
    "regression": RegressionState,
}

_TASK_GROUPS = {"classification": ("classification", "roc"), "regression": ("regression",)}


def make_states(
    groups: Sequence[str],
    *,
    task: str,
    num_classes: int | None = None,
    label_columns: Sequence[str] | None = None,
    roc_steps: int = DEFAULT_ROC_THRESHOLD_STEPS,
    exact_auc: bool = False,
    top_k: Sequence[int] = DEFAULT_TOP_K,
) -> dict[str, MetricState]:
    """Empty states for a request's ``metrics`` list (duplicates are kept once, in order).

    ``task`` is ``"classification"`` (groups ``"classification"`` and ``"roc"``, which need ``num_classes``)
    or ``"regression"`` (group ``"regression"``, which needs ``label_columns``).
    """
    if task not in _TASK_GROUPS:
        raise ValueError(f"unknown task {task!r}; expected one of {sorted(_TASK_GROUPS)}")
    if isinstance(groups, str):
        raise ValueError("groups must be a list of metric group names, not a string")
    if not groups:
        raise ValueError(f"no metric groups requested; expected some of {list(GROUPS)}")
    states: dict[str, MetricState] = {}
    for group in groups:
        if group not in _STATE_TYPES:
            raise ValueError(f"unknown metric group {group!r}; expected one of {list(GROUPS)}")
        if group not in _TASK_GROUPS[task]:
            raise ValueError(f"metric group {group!r} does not apply to a {task} task")
        if group in states:
            continue
        if group == "regression":
            if label_columns is None:
                raise ValueError("the regression metric group needs label_columns")
            states[group] = RegressionState(label_columns)
            continue
        if num_classes is None:
            raise ValueError(f"the {group} metric group needs num_classes")
        if group == "classification":
            states[group] = ClassificationState(num_classes, top_k)
        else:
            states[group] = RocState(num_classes, steps=roc_steps, exact=exact_auc)
    return states


def update_states(
    states: Mapping[str, MetricState],
    labels: npt.ArrayLike,
    *,
    probabilities: npt.ArrayLike | None = None,
    predictions: npt.ArrayLike | None = None,
    weights: npt.ArrayLike | None = None,
    mask: npt.ArrayLike | None = None,
) -> None:
    """Feed one batch to every state: ``predictions`` are class indices for classification and the predicted
    values for regression; ``probabilities`` feed classification (top-k, and the decision when there are no
    ``predictions``) and ROC. Only classification takes ``weights``."""
    for group, state in states.items():
        if isinstance(state, ClassificationState):
            state.update(labels, probabilities, predictions=predictions, weights=weights, mask=mask)
            continue
        if weights is not None:
            raise ValueError(f"the {group} metric group does not support row weights")
        if isinstance(state, RocState):
            if probabilities is None:
                raise ValueError("the roc metric group needs probabilities (scores), not only hard predictions")
            state.update(labels, probabilities, mask=mask)
        elif isinstance(state, RegressionState):
            if predictions is None:
                raise ValueError("the regression metric group needs predictions")
            state.update(labels, predictions, mask=mask)
        else:
            raise ValueError(f"unsupported state type {type(state).__name__} for group {group!r}")


def state_from_dict(d: Mapping[str, Any]) -> MetricState:
    """Rebuild a state from its ``to_dict()`` form, whatever its kind."""
    kind = d.get("kind") if isinstance(d, Mapping) else None
    if kind not in _STATE_TYPES:
        raise ValueError(f"unknown state kind {kind!r}; expected one of {list(GROUPS)}")
    return _STATE_TYPES[kind].from_dict(d)


def states_to_dict(states: Mapping[str, MetricState]) -> dict[str, dict[str, Any]]:
    return {group: state.to_dict() for group, state in states.items()}


def states_from_dict(d: Mapping[str, Any] | str) -> dict[str, MetricState]:
    """Inverse of :func:`states_to_dict`; also takes the JSON string of it."""
    if isinstance(d, str):
        d = json.loads(d)
    if not isinstance(d, Mapping):
        raise ValueError(f"expected a mapping of metric group -> state, got {type(d).__name__}")
    states: dict[str, MetricState] = {}
    for group, value in d.items():
        state = value.copy() if isinstance(value, MetricState) else state_from_dict(value)
        if group != state.kind:
            raise ValueError(f"metric group {group!r} holds a {state.kind!r} state")
        states[group] = state
    return states


def merge_states(parts: Iterable[Mapping[str, Any] | str]) -> dict[str, MetricState]:
    """Merge the partitions' group -> state dicts into new states (the inputs are left as they were).

    Each part maps group names to states, to their ``to_dict()`` forms, or is the JSON string of the latter;
    all parts must hold the same groups. Raises ValueError for no parts at all: build empty states with
    :func:`make_states` for an empty data set.
    """
    merged: dict[str, MetricState] | None = None
    for i, part in enumerate(parts):
        states = states_from_dict(part)
        if merged is None:
            merged = states
            continue
        if set(states) != set(merged):
            raise ValueError(f"partial state {i} has metric groups {sorted(states)}, expected {sorted(merged)}")
        for group, state in states.items():
            merged[group].merge(state)
    if merged is None:
        raise ValueError("no partial states to merge (use make_states for an empty data set)")
    return merged


def results(states: Mapping[str, MetricState]) -> dict[str, dict[str, Any]]:
    return {group: state.result() for group, state in states.items()}
