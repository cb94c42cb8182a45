"""Reading the JSON a user posts: objects that reject unknown keys and name the exact field in every error,
numbers in ranges, integer pairs and shapes, and short renderings of bad values for the messages.

No third-party imports, like the whole package: the API process imports it (see :mod:`workers.training.torch.spec`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, TypeAlias

from workers.errors import SpecError
from workers.numbers import is_finite_number

Shape: TypeAlias = tuple[int, ...]
Pair: TypeAlias = tuple[int, int]

_MISSING: Any = object()


def _show(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _quoted(names: list[str]) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return is_finite_number(value)


_NETWORK_WIDE = frozenset({"weight_init", "l2"})
"""Settings of the whole network that DL4J users set per layer (its layers take them): a layer's error says where."""


class _Obj:
    """A JSON object being read; remembers its path so every error names the exact field."""

    def __init__(self, value: Any, path: str, allowed: tuple[str, ...], what: str) -> None:
        if not isinstance(value, Mapping):
            raise SpecError(path, f"must be an object, got {_show(value)}")
        unknown = sorted(str(key) for key in value if key not in allowed)
        if unknown:
            noun = "key" if len(unknown) == 1 else "keys"
            whole = sorted(set(unknown) & _NETWORK_WIDE) if what != "network" else []
            hint = f" ({' and '.join(whole)} apply to the whole network: set network.{whole[0]})" if whole else ""
            raise SpecError(
                path, f"unknown {noun} {_quoted(unknown)} for {what}; allowed: {', '.join(sorted(allowed))}{hint}"
            )
        self.value = value
        self.path = path

    def at(self, key: str) -> str:
        return f"{self.path}.{key}"

    def has(self, key: str) -> bool:
        return self.value.get(key) is not None

    def raw(self, key: str, default: Any = _MISSING) -> Any:
        value = self.value.get(key)
        if value is None:
            if default is _MISSING:
                raise SpecError(self.at(key), "is required")
            return default
        return value

    def integer(self, key: str, default: Any = _MISSING, *, minimum: int = 1) -> int:
        value = self.raw(key, default)
        if not _is_int(value) or value < minimum:
            kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise SpecError(self.at(key), f"must be {kind}, got {_show(value)}")
        return int(value)

    def number(
        self,
        key: str,
        default: Any = _MISSING,
        *,
        low: float = -math.inf,
        high: float = math.inf,
        low_open: bool = False,
        high_open: bool = False,
    ) -> float:
        value = self.raw(key, default)
        ok = _is_number(value)
        if ok:
            ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
        if not ok:
            what = _describe_range(low, high, low_open, high_open)
            if isinstance(value, int | float) and not isinstance(value, bool) and not _is_number(value):
                what += " (finite)"  # NaN, infinity, or a whole number too large for a float
            raise SpecError(self.at(key), f"must be {what}, got {_show(value)}")
        return float(value)

    def flag(self, key: str, default: Any = _MISSING) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise SpecError(self.at(key), f"must be true or false, got {_show(value)}")
        return value

    def choice(self, key: str, options: tuple[str, ...], what: str, default: Any = _MISSING) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str) or value not in options:
            raise SpecError(self.at(key), f"unknown {what} {_show(value)}; known: {', '.join(options)}")
        return value

    def pair(self, key: str, default: Any = _MISSING) -> Pair:
        value = self.raw(key, default)
        pair = _pair_value(value, minimum=1)
        if pair is None:
            raise SpecError(self.at(key), f"must be a positive integer or a pair, got {_show(value)}")
        return pair


def _pair_value(value: Any, *, minimum: int) -> Pair | None:
    if _is_int(value) and value >= minimum:
        return (int(value), int(value))
    if isinstance(value, list | tuple) and len(value) == 2 and all(_is_int(v) and v >= minimum for v in value):
        return (int(value[0]), int(value[1]))
    return None


def _describe_range(low: float, high: float, low_open: bool, high_open: bool) -> str:
    if high == math.inf:
        if low == -math.inf:
            return "a number"
        if low == 0:
            return "a positive number" if low_open else "a number >= 0"
        return f"a number {'>' if low_open else '>='} {low:g}"
    return f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"


def _shape_value(value: Any, path: str) -> Shape:
    if not isinstance(value, list | tuple) or not 1 <= len(value) <= 3 or not all(_is_int(v) and v >= 1 for v in value):
        raise SpecError(
            path,
            "must be a list of 1 to 3 positive integers: [features], [time, features] or "
            f"[channels, height, width], got {_show(value)}",
        )
    return tuple(int(v) for v in value)


def _fmt(shape: Shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
