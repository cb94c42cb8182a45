"""What every mergeable metric state shares: the :class:`MetricState` interface, the checks of the numpy
batches fed to ``update`` and of the plain dicts fed to ``from_dict``, and the helpers the results use.

A *state* holds sufficient statistics, never rows:

- ``update(...)`` adds one numpy batch (call it as often as a partition has batches),
- ``merge(other)`` adds another state into this one and returns it; merging is associative and commutative,
  and merging partial states gives what one state fed all the rows would give,
- ``to_dict()`` / ``from_dict(d)`` convert to and from plain JSON-able values (lists, ints, floats, strings),
  which is how states travel from executors to the driver; ``json`` round-trips them exactly,
- ``result()`` gives the final metrics as a JSON-able dict.

Counts are int64 and merge bit-exactly. Float sums (weighted counts, regression sums) merge exactly up to the
order of float additions: merged results equal single-pass results to about 1e-12 relative, not bitwise.

Only stdlib and numpy are imported: this module runs inside Spark executors.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt

STATE_VERSION = 1

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# --- input validation ---------------------------------------------------------------------------------------


def _item(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _column(values: npt.ArrayLike, n: int | None, what: str) -> np.ndarray:
    a = np.asarray(values)
    if a.ndim != 1:
        raise ValueError(f"{what} must be a 1-D array (one value per row), got shape {a.shape}")
    if n is not None and a.shape[0] != n:
        raise ValueError(f"{what} has {a.shape[0]} rows but labels have {n}")
    return a


def _row_mask(mask: npt.ArrayLike | None, n: int) -> BoolArray | None:
    if mask is None:
        return None
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        raise ValueError(f"mask must be a boolean array, got dtype {m.dtype}")
    if m.shape != (n,):
        raise ValueError(f"mask must have shape ({n},) (one flag per row), got {m.shape}")
    return m


def _check_finite(values: np.ndarray, what: str) -> None:
    if values.size and not np.isfinite(values).all():
        bad = int(np.count_nonzero(~np.isfinite(values)))
        raise ValueError(f"{what} contain NaN or infinite values ({bad} of {values.size})")


def _class_indices(values: np.ndarray, num_classes: int, what: str) -> IntArray:
    """Class indices as int64; whole-valued floats (Spark's double label columns) and booleans are accepted."""
    a = values
    if a.dtype == np.bool_:
        a = a.astype(np.int64)
    elif np.issubdtype(a.dtype, np.floating):
        _check_finite(a, what)
        fractional = a != np.floor(a)
        if fractional.any():
            raise ValueError(f"{what} must be whole class indices, got {_item(a[fractional][0])!r}")
    elif not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{what} must be integer class indices, got dtype {a.dtype}")
    if a.size:
        low, high = a.min(), a.max()
        if low < 0 or high > num_classes - 1:
            bad = low if low < 0 else high
            raise ValueError(f"{what} must be class indices in 0..{num_classes - 1}, got {_item(bad)!r}")
    return a.astype(np.int64, copy=False)


def _check_num_classes(num_classes: Any) -> int:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int | np.integer) or num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    return int(num_classes)


def _float_matrix(values: npt.ArrayLike, what: str) -> FloatArray:
    a: np.ndarray = np.asarray(values)
    if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"{what} must be numeric, got dtype {a.dtype}")
    return a.astype(np.float64, copy=False)


def _mean_of_defined(values: Iterable[float | None]) -> float | None:
    defined = [v for v in values if v is not None]
    return math.fsum(defined) / len(defined) if defined else None


def _require(d: Mapping[str, Any], kind: str) -> None:
    if not isinstance(d, Mapping):
        raise ValueError(f"a {kind} state must be a mapping, got {type(d).__name__}")
    if d.get("kind") != kind:
        raise ValueError(f"expected a {kind!r} state, got kind {d.get('kind')!r}")
    if d.get("version") != STATE_VERSION:
        raise ValueError(f"unsupported {kind} state version {d.get('version')!r} (expected {STATE_VERSION})")


def _array_field(d: Mapping[str, Any], key: str, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    if key not in d:
        raise ValueError(f"state field {key!r} is missing")
    try:
        a: np.ndarray = np.asarray(d[key], dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"state field {key!r} is not a numeric array: {exc}") from None
    if a.shape != shape:
        raise ValueError(f"state field {key!r} must have shape {shape}, got {a.shape}")
    if dtype is np.float64:
        _check_finite(a, f"state field {key!r}")
    if dtype is np.int64 and a.size and a.min() < 0:
        raise ValueError(f"state field {key!r} holds negative counts")
    return a


# --- the interface -----------------------------------------------------------------------------------------


class MetricState(ABC):
    """Common interface of the mergeable states; ``update`` differs per state (see each class)."""

    kind: ClassVar[str]

    @abstractmethod
    def merge(self, other: MetricState) -> Self:
        """Add ``other`` into this state (``other`` is left as it was) and return this state."""

    @abstractmethod
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form; ``type(self).from_dict(self.to_dict())`` is an equal state."""

    @classmethod
    @abstractmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Self: ...

    @abstractmethod
    def result(self) -> dict[str, Any]:
        """The final metrics, JSON-able."""

    def copy(self) -> Self:
        return type(self).from_dict(self.to_dict())

    def _check_mergeable(self, other: MetricState) -> None:
        if type(other) is not type(self):
            raise ValueError(f"cannot merge a {other.kind!r} state into a {self.kind!r} state")
