"""Categorical features (``dataset.categorical``; DataVec's ``categoricalToOneHot``): a column of categories becomes
one 0/1 column per category seen in the training rows.

The levels (each column's distinct values, as text, sorted) are found in one Spark pass over the training rows,
stored with the model, and applied identically wherever the model sees rows: in the training job (Spark), in batch
prediction and evaluation (Spark, :func:`workers.data.one_hot.expand`), and online (:meth:`Categories.encode`, numpy). A
category the training rows did not have encodes as all zeros; a null is a bad row, as in any feature.

A one-hot column is named ``<column>=<category>`` (``payment_type=cash``), with the characters Spark and xgboost
give a meaning to in a name (``.`` and backtick; ``[``, ``]`` and ``<``) replaced by ``_``; the model's features
are those names, its inputs the request's columns.

Executor-side: numpy only; the Spark side (fitting, expanding a DataFrame) is :mod:`workers.data.one_hot`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from workers.numbers import shown

MAX_LEVELS = 1000
"""Categories per column; more is an identifier, not a category (the job fails and says so)."""
_UNSAFE = re.compile(r"[.`\[\]<]")


def too_many(column: str) -> str:
    """Why a column with more than :data:`MAX_LEVELS` categories is refused (the job's failure, a request's 422)."""
    return (f"{column!r} has more than {MAX_LEVELS} distinct values in the training data, the most a categorical "
            "column holds (an identifier is not a feature: leave it out, or bucket it)")  # fmt: skip


WHOLE = frozenset({"tinyint", "smallint", "int", "bigint"})
"""Spark types of whole-number categorical columns."""
_BITS = {"tinyint": 8, "smallint": 16, "int": 32, "bigint": 64}
TRUE_TEXT = frozenset({"t", "true", "y", "yes", "1"})
FALSE_TEXT = frozenset({"f", "false", "n", "no", "0"})
"""The text Spark reads as a boolean (any case, spaces around it ignored)."""
_WHOLE_TEXT = re.compile(r"[ \t\r\n]*[+-]?[0-9]+[ \t\r\n]*")


def level_of(value: Any, kind: str = "string") -> str | None:
    """A value as the category text of a column of Spark type ``kind``, as Spark reads it when it casts the value to
    ``kind`` and then to string (:func:`workers.data.one_hot.text_of`): a whole number ``3`` (from ``3``, ``3.0``,
    ``"03"`` or ``" +3"``), ``true``/``false`` (from a boolean, ``0``/``1``, or the text Spark reads as one: ``t``,
    ``yes``, ``N``, ...), text as it is. None for a null. Raises ValueError for a value the column's type cannot hold
    (``"x"`` or ``2.5`` for a whole-number column, ``2`` for a boolean one): where Spark would read it anyway
    (truncating 2.5 to 2, reading 2 as true) the job's bad-row check refuses it too (``workers.data.clean``)."""
    if value is None or (isinstance(value, float | np.floating) and np.isnan(value)):
        return None
    boolean = isinstance(value, bool | np.bool_)
    if kind in WHOLE:
        if boolean:
            raise ValueError("is a boolean; the column's categories are whole numbers")
        if isinstance(value, str):
            if not _WHOLE_TEXT.fullmatch(value):
                raise ValueError("is not a whole number; the column's categories are whole numbers")
            return _in_range(int(value), kind)
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError("is not a whole number; the column's categories are whole numbers") from None
        if not number.is_integer():
            raise ValueError("is not a whole number; the column's categories are whole numbers")
        return _in_range(int(value) if isinstance(value, int | np.integer) else int(number), kind)
    if kind == "boolean":
        text = ("true" if value else "false") if boolean else str(value).strip().lower()
        if isinstance(value, int | float | np.integer | np.floating) and not boolean and value in (0, 1):
            text = "true" if value == 1 else "false"
        if text in TRUE_TEXT or text in FALSE_TEXT:
            return "true" if text in TRUE_TEXT else "false"
        raise ValueError("is not a boolean; the column's categories are true and false")
    if boolean:
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return repr(float(value))
    return str(value)


def _in_range(number: int, kind: str) -> str:
    """The text of a whole number its Spark type holds (Spark reads a larger one as null: a bad row)."""
    half = 2 ** (_BITS[kind] - 1)
    if not -half <= number < half:
        raise ValueError(f"is outside the {kind} range of the column's categories")
    return str(number)


@dataclass(frozen=True)
class Categories:
    inputs: tuple[str, ...]
    """The request's feature columns, in order."""
    levels: Mapping[str, tuple[str, ...]]
    """Each categorical column's categories, sorted."""
    types: Mapping[str, str] = field(default_factory=dict)
    """Each categorical column's Spark type in the training data (default string): how a value becomes its text."""

    @cached_property
    def names(self) -> tuple[str, ...]:
        """The model's feature columns: each input, or in its place one column per category."""
        out: list[str] = []
        for column in self.inputs:
            if column not in self.levels:
                out.append(column)
                continue
            # Spark resolves column names in any case: "sex=Male" and "sex=male" are one name to it
            taken: set[str] = {name.lower() for name in (*self.inputs, *out)}
            for level in self.levels[column]:
                name = _UNSAFE.sub("_", f"{column}={level}")
                while name.lower() in taken:  # categories that differ only in case or in a replaced character
                    name += "_"
                taken.add(name.lower())
                out.append(name)
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        levels = {c: list(v) for c, v in self.levels.items()}
        return {"inputs": list(self.inputs), "levels": levels, "types": {c: self.kind(c) for c in self.levels}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Categories:
        levels = {str(c): tuple(str(v) for v in values) for c, values in dict(d["levels"]).items()}
        types = {str(c): str(t) for c, t in dict(d.get("types") or {}).items()}
        return cls(inputs=tuple(str(c) for c in d["inputs"]), levels=levels, types=types)

    def kind(self, column: str) -> str:
        """The column's Spark type as trained (whole numbers of any width alike)."""
        kind = self.types.get(column, "string")
        return kind if kind in (*WHOLE, "boolean") else "string"

    def encode(self, rows: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, list[str]]:
        """Rows (column -> value) as the model's float64 features ``(n, len(names))``, and a problem per bad row
        (``row <i>: ...``; empty when none): a null category, or one its column's type cannot hold. A numeric input
        that is not a number is NaN, for the caller's finite check. Columns missing from a row are the caller's to
        refuse first."""
        width = len(self.names)
        x = np.zeros((len(rows), width), dtype=np.float64)
        problems: list[str] = []
        positions = self._positions()
        for i, row in enumerate(rows):
            for column, (start, index) in positions.items():
                value = row[column]
                if index is None:
                    x[i, start] = _number(value)
                    continue
                try:
                    level = level_of(value, self.kind(column))
                except ValueError as exc:
                    problems.append(f"row {i}: {column}: {shown(value)} {exc}")  # (true, "x": as the request wrote it)
                    continue
                if level is None:
                    problems.append(f"row {i}: {column} is null; a categorical feature needs a category")
                    continue
                found = index.get(level)
                if found is not None:
                    x[i, start + found] = 1.0
        return x, problems

    def _positions(self) -> dict[str, tuple[int, dict[str, int] | None]]:
        """Each input's first column among the names, and for a categorical one its categories' offsets."""
        out: dict[str, tuple[int, dict[str, int] | None]] = {}
        start = 0
        for column in self.inputs:
            levels = self.levels.get(column)
            out[column] = (start, {level: k for k, level in enumerate(levels)} if levels is not None else None)
            start += len(levels) if levels is not None else 1
        return out


def _number(value: Any) -> float:
    """A numeric input's value (a boolean column's true and false too: 1.0 and 0.0, as Spark reads them)."""
    if not isinstance(value, int | float):
        return float("nan")
    return float(value)
