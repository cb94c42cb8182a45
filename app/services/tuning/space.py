"""Search spaces: dotted paths into a ``/train`` body, the values they take, and Optuna's distributions."""

from __future__ import annotations

import copy
import itertools
import math
import warnings
from typing import TYPE_CHECKING, Any

from app.schemas.tune import Distribution

# Optuna warns that a choice among lists or objects (layer stacks) cannot go to its persistent storage; this search's
# study never goes there (it is rebuilt from the trial jobs), so the warning would only puzzle the driver's reader.
# Set once, matched by its message alone (from Python 3.12 Optuna attributes it to its caller's module).
warnings.filterwarnings("ignore", message="Choices for a categorical distribution should be")

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

_MISSING = object()


def index(part: str) -> bool:
    """``part`` is a list index as written once: ``0``, ``12``; not ``00``, ``007`` or another script's digits
    (Arabic-Indic zero), which int() reads as the same index, so that two paths would name one value."""
    return part.isascii() and part.isdigit() and str(int(part)) == part


def _key(node: Any, part: str) -> Any:
    if isinstance(node, list):
        return int(part) if index(part) and int(part) < len(node) else _MISSING
    if isinstance(node, dict):
        return part if part in node else _MISSING
    return _MISSING


def lookup(body: dict[str, Any], path: str) -> Any:
    """The value at ``path`` (``network.layers.0.units``), or ``_MISSING``."""
    node: Any = body
    for part in path.split("."):
        key = _key(node, part)
        if key is _MISSING:
            return _MISSING
        node = node[key]
    return node


def exists(body: dict[str, Any], path: str) -> bool:
    return lookup(body, path) is not _MISSING


def substitute(body: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``body`` with each path's value replaced (every path exists: checked before)."""
    out = copy.deepcopy(body)
    for path, value in values.items():
        *parents, last = path.split(".")
        node: Any = out
        for part in parents:
            node = node[_key(node, part)]
        node[_key(node, last)] = value
    return out


def params_of(body: dict[str, Any], space: dict[str, Distribution]) -> dict[str, Any]:
    """The sampled values a trial's body holds (how a resumed study reads its trials back). A uniform value the body
    keeps as a whole number (a stepped ``uniform`` over ``params.max_depth``: the trial's request holds ``3``) reads
    back as the float Optuna sampled, as the trials of the first attempt show it."""
    values = {path: lookup(body, path) for path in space}
    for path, dist in space.items():
        value = values[path]
        if dist.type in ("uniform", "loguniform") and isinstance(value, int) and not isinstance(value, bool):
            values[path] = float(value)
    return values


def to_optuna(dist: Distribution) -> BaseDistribution:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if dist.type == "choice":
        return CategoricalDistribution(list(dist.values or []))
    low, high = float(dist.low or 0), float(dist.high or 0)
    if dist.type == "int":
        return IntDistribution(int(low), int(high), step=int(dist.step or 1), log=bool(dist.log))
    if dist.type == "loguniform":
        return FloatDistribution(low, high, log=True)
    return FloatDistribution(low, high, step=dist.step)


MAX_GRID_AXIS = 10_000


def grid_size(space: dict[str, Distribution]) -> int | None:
    """How many points a grid search has: the product of its axes' sizes, counted without listing any (None: a range
    without a grid; ValueError: an axis of more than MAX_GRID_AXIS points)."""
    counts = []
    for path, dist in space.items():
        count = dist.points()
        if count is None:
            return None
        if dist.type != "choice" and count > MAX_GRID_AXIS:
            raise ValueError(f"{path}: {count:,} grid points; a grid axis takes at most {MAX_GRID_AXIS:,}")
        counts.append(count)
    return math.prod(counts)


def grid(space: dict[str, Distribution], limit: int | None = None) -> list[dict[str, Any]] | None:
    """The points of a grid search in the order the values are listed, the first ``limit`` of them (a search runs
    ``trials`` points: two axes of 10,000 values hold 10^8, which no search lists); None: a range without a grid;
    ValueError: an axis of more than MAX_GRID_AXIS points."""
    if grid_size(space) is None:
        return None
    axes: list[list[Any]] = []
    for dist in space.values():
        if dist.type == "choice":
            axes.append(list(dist.values or []))
            continue
        low, step = float(dist.low or 0), float(dist.step or 1)
        points = [round(low + i * step, 12) for i in range(dist.points() or 0)]  # 0.30000000000000004 is 0.3
        axes.append([int(p) for p in points] if dist.type == "int" else points)
    combos = itertools.islice(itertools.product(*axes), limit)
    return [dict(zip(space, combo, strict=True)) for combo in combos]
