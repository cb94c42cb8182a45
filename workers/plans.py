"""Plans as JSON: a job is planned once, in the request, and the plan is stored with the job.

A plan is a frozen dataclass of plain data (datasets already resolved, specs already checked: ``TorchPlan``,
``XGBoostPlan``, ``SparkMLPlan``, ``EvaluationPlan``, ``PredictionPlan``, a recipe's plan). :func:`dump` turns one
into JSON-able values for the job's ``plan`` column; :func:`load` rebuilds it from the dataclass's type hints, so
the runner executes exactly what the request validated. A field missing from a stored plan takes its default, and
a stored key the dataclass no longer has is ignored, so plans written by an older release still load.

What round-trips: nested plan dataclasses, ``X | None``, tuples and lists, dicts with string keys, and plain JSON
values (a tuple inside a field typed ``Any`` comes back as a list: type it). Anything else is refused when the
plan is stored, not discovered when it is loaded.
"""

from __future__ import annotations

import dataclasses
import json
import types
from collections.abc import Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")
_SCALARS = (bool, int, float, str)


@dataclasses.dataclass(frozen=True)
class DeferredPlan:
    """What a request stores when checking it against the data needs a Spark job (app/services/datasets/
    deferred.py): the checks it left to the job (``deferred_checks``, what each would read and why Spark reads it),
    and the task slots the job will hold. The job plans the stored request with Spark before it runs, with the same
    checks and messages as a request that could read its data on the driver."""

    deferred_checks: tuple[str, ...]
    num_workers: int = 1


def is_deferred(stored: Mapping[str, Any] | None) -> bool:
    """Whether a stored plan is a :class:`DeferredPlan` (the job plans its request)."""
    return stored is not None and "deferred_checks" in stored


def dump(plan: Any) -> dict[str, Any]:
    """JSON-able values of a plan dataclass (tuples become lists)."""
    if not dataclasses.is_dataclass(plan) or isinstance(plan, type):
        raise TypeError(f"a plan is a dataclass instance, not {type(plan).__name__}")
    out = _plain(dataclasses.asdict(plan))
    assert isinstance(out, dict)
    try:  # what the job's JSON column will hold: no NaN, no infinity, nothing json cannot write
        json.dumps(out, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{type(plan).__name__} does not fit in JSON: {exc}") from exc
    return out


def load(cls: type[T], data: Mapping[str, Any]) -> T:
    """The plan of type ``cls`` that :func:`dump` stored as ``data``."""
    built = _build(cls, data)
    assert isinstance(built, cls)
    return built


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"plan dicts have string keys (JSON objects do), not {list(value)[:5]}")
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _build(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = get_type_hints(tp)
        stored = [f.name for f in dataclasses.fields(tp) if f.init and f.name in value]
        given = {name: _build(hints[name], value[name]) for name in stored}
        return tp(**given)
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        if len(options) == 1:
            return _build(options[0], value)
        if all(a in _SCALARS for a in options):
            return value  # a union of scalars is stored as is
        raise TypeError(f"a plan field of type {tp} cannot be rebuilt from JSON: use one type (or it | None)")
    if origin is tuple:
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_build(args[0], v) for v in value)
        return tuple(_build(a, v) for a, v in zip(args, value, strict=True))
    if origin is list:
        return [_build(get_args(tp)[0], v) for v in value]
    if origin is dict:
        item = get_args(tp)[1] if get_args(tp) else Any
        return {k: _build(item, v) for k, v in value.items()}
    if origin is Literal or tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value
