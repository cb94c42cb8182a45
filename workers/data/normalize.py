"""Feature normalizers (DL4J's NormalizerStandardize, NormalizerMinMaxScaler, ImagePreProcessingScaler).

Fitted on the training rows in one Spark pass, stored with the model as JSON, and applied by the same
:meth:`Normalizer.apply` in training, evaluation and both kinds of prediction, so the numbers always match.
Statistics are per feature position (a numeric column, or a position of the array column); ``image`` scales
every value by one factor into [0, 1].

``apply`` is executor-side (numpy only); ``fit`` runs on the driver and ships a numpy-only function.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

Kind = Literal["standardize", "minmax", "image"]
KINDS = ("standardize", "minmax", "image")


@dataclass(frozen=True)
class Normalizer:
    kind: Kind
    shift: tuple[float, ...]
    """Subtracted first: the mean (standardize), the minimum (minmax), 0 (image)."""
    scale: tuple[float, ...]
    """Then divided by: the standard deviation, max - min, or the largest value; 1 where that is 0."""
    count: int = 0

    def apply(self, x: np.ndarray) -> np.ndarray:
        """Normalize float rows ``(n, features)`` or ``(n, *shape)`` (flattened positions match the fit)."""
        flat = x.reshape(len(x), -1).astype(np.float32, copy=True)
        shift = np.asarray(self.shift, dtype=np.float32)
        scale = np.asarray(self.scale, dtype=np.float32)
        if shift.size not in (1, flat.shape[1]):
            raise ValueError(f"normalizer fitted on {shift.size} features, rows have {flat.shape[1]}")
        flat -= shift
        flat /= scale
        return flat.reshape(x.shape)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "shift": list(self.shift), "scale": list(self.scale), "count": self.count}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Normalizer:
        if d.get("kind") not in KINDS:
            raise ValueError(f"unknown normalizer {d.get('kind')!r}; one of {', '.join(KINDS)}")
        return cls(kind=d["kind"], shift=tuple(d["shift"]), scale=tuple(d["scale"]), count=int(d.get("count", 0)))


@dataclass
class Moments:
    """Count, mean, M2 (sum of squared deviations), min and max per position; merged exactly-enough with Chan's
    parallel formula, so partitions can be summarised independently."""

    n: int
    mean: np.ndarray
    m2: np.ndarray
    low: np.ndarray
    high: np.ndarray

    @classmethod
    def of(cls, x: np.ndarray) -> Moments:
        x = x.astype(np.float64, copy=False)
        if len(x) == 0:
            width = x.shape[1] if x.ndim == 2 else 0
            empty = np.zeros(width)
            return cls(0, empty, empty.copy(), np.full(width, np.inf), np.full(width, -np.inf))
        mean = x.mean(axis=0)
        return cls(len(x), mean, ((x - mean) ** 2).sum(axis=0), x.min(axis=0), x.max(axis=0))

    def merge(self, other: Moments) -> Moments:
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        n = self.n + other.n
        delta = other.mean - self.mean
        mean = self.mean + delta * other.n / n
        m2 = self.m2 + other.m2 + delta**2 * self.n * other.n / n
        return Moments(n, mean, m2, np.minimum(self.low, other.low), np.maximum(self.high, other.high))

    def to_row(self) -> dict[str, Any]:
        return {"n": self.n, "mean": self.mean.tolist(), "m2": self.m2.tolist(), "low": self.low.tolist(),
                "high": self.high.tolist()}  # fmt: skip

    @classmethod
    def from_row(cls, r: dict[str, Any]) -> Moments:
        return cls(int(r["n"]), np.asarray(r["mean"]), np.asarray(r["m2"]), np.asarray(r["low"]), np.asarray(r["high"]))


def normalizer_from(kind: Kind, m: Moments) -> Normalizer:
    if m.n == 0:
        raise ValueError("cannot fit a normalizer on no rows")

    def safe(values: np.ndarray) -> tuple[float, ...]:
        return tuple(float(v) if v > 0 and math.isfinite(v) else 1.0 for v in values)

    if kind == "standardize":
        return Normalizer(kind, tuple(float(v) for v in m.mean), safe(np.sqrt(m.m2 / m.n)), m.n)
    if kind == "minmax":
        return Normalizer(kind, tuple(float(v) for v in m.low), safe(m.high - m.low), m.n)
    return Normalizer(kind, (0.0,), safe(np.array([m.high.max()])), m.n)


def _partition_moments(features: list[str], array_column: bool) -> Any:
    """The function Spark runs per partition: Arrow batches in, one row of JSON moments out (numpy only)."""

    def summarise(batches: Iterator[Any]) -> Iterator[Any]:
        import json

        import numpy as np
        import pyarrow as pa

        from workers.data.normalize import Moments

        total: Moments | None = None
        for batch in batches:
            if array_column:
                column = batch.column(features[0])
                width = len(column[0]) if len(column) else 0
                x = column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), width)
            else:
                x = np.stack([batch.column(c).to_numpy(zero_copy_only=False) for c in features], axis=1)
            part = Moments.of(np.asarray(x, dtype=np.float64))
            total = part if total is None else total.merge(part)
        rows = [json.dumps(total.to_row())] if total is not None and total.n else []
        yield pa.RecordBatch.from_arrays([pa.array(rows, pa.string())], names=["moments"])

    return summarise


def fit(df: DataFrame, features: tuple[str, ...], kind: Kind, *, array_column: bool) -> Normalizer:
    """One pass over ``df`` (already cleaned: no nulls or NaN in the features)."""
    import json

    rows = df.select(*features).mapInArrow(_partition_moments(list(features), array_column), "moments string")
    total: Moments | None = None
    for row in rows.collect():
        part = Moments.from_row(json.loads(row["moments"]))
        total = part if total is None else total.merge(part)
    if total is None:
        raise ValueError("cannot fit a normalizer on no rows")
    return normalizer_from(kind, total)
