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
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_LEVELS = 1000
"""Categories per column; more is an identifier, not a category (the job fails and says so)."""
_UNSAFE = re.compile(r"[.`\[\]<]")


def level_of(value: Any) -> str | None:
    """A value as the text Spark's ``cast("string")`` gives it (the level it is compared with): ``true``/``false``
    for booleans, ``3`` for an integer, ``1.5`` for a float; None for a null."""
    if value is None:
        return None
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return None if np.isnan(value) else repr(float(value))
    return str(value)


@dataclass(frozen=True)
class Categories:
    inputs: tuple[str, ...]
    """The request's feature columns, in order."""
    levels: Mapping[str, tuple[str, ...]]
    """Each categorical column's categories, sorted."""

    @property
    def names(self) -> tuple[str, ...]:
        """The model's feature columns: each input, or in its place one column per category."""
        out: list[str] = []
        for column in self.inputs:
            if column not in self.levels:
                out.append(column)
                continue
            taken: set[str] = set(self.inputs) | set(out)
            for level in self.levels[column]:
                name = _UNSAFE.sub("_", f"{column}={level}")
                while name in taken:  # two categories that differ only in a replaced character
                    name += "_"
                taken.add(name)
                out.append(name)
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": list(self.inputs), "levels": {c: list(v) for c, v in self.levels.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Categories:
        levels = {str(c): tuple(str(v) for v in values) for c, values in dict(d["levels"]).items()}
        return cls(inputs=tuple(str(c) for c in d["inputs"]), levels=levels)

    def encode(self, rows: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, list[str]]:
        """Rows (column -> value) as the model's float64 features ``(n, len(names))``, and a problem per bad row
        (empty when none): a null category, or a value of a numeric input that is not a number (NaN then, for the
        caller's finite check). Columns missing from a row are the caller's to refuse first."""
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
                level = level_of(value)
                if level is None:
                    problems.append(f"row {i}: {column} is null; it is a category")
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
    if isinstance(value, bool) or not isinstance(value, int | float):
        return float("nan")
    return float(value)
