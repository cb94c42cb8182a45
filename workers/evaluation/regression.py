"""Regression metrics (DL4J's ``RegressionEvaluation``): MSE, RMSE, MAE, r2 and mean error per label column, in
the mergeable :class:`RegressionState`.

Only stdlib and numpy are imported: this module runs inside Spark executors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from workers.evaluation.base import (
    STATE_VERSION,
    BoolArray,
    FloatArray,
    IntArray,
    MetricState,
    _array_field,
    _check_finite,
    _float_matrix,
    _mean_of_defined,
    _require,
)


class RegressionState(MetricState):
    """Per-column error sums and label moments (DL4J's ``RegressionEvaluation``).

    ``update`` takes ``labels`` and ``predictions`` of shape (n, k) for k label columns ((n,) when k == 1)
    and an optional ``mask`` (n,) or (n, k) of entries to count. The error is ``prediction - label``, so
    ``mean_error`` (bias) is positive for over-prediction.

    Per column the state keeps the count, the sums of the error, squared error and absolute error (plain
    float64 sums), and the label mean with the sum of squared deviations from it (merged with Chan's
    pairwise formula). Raw sums of y and y^2 would give SST = sum(y^2) - (sum y)^2 / n, which loses all
    precision when the label mean is large against its spread (labels near 1e6 with unit spread lose r2 in
    the fourth digit); the centred form does not. Merged results equal single-pass results to ~1e-12
    relative, not bitwise.

    r2 is ``1 - SSE / SST``: None with fewer than 2 rows, and for constant labels 1.0 if the predictions are
    exact, else 0.0 (sklearn's ``force_finite``). Columns without rows have None metrics. With several
    columns, ``average`` holds the unweighted mean of each metric over the columns where it is defined
    (sklearn's ``multioutput="uniform_average"``).
    """

    kind = "regression"

    _SUMS = ("count", "label_mean", "label_m2", "sum_error", "sum_squared_error", "sum_absolute_error")

    def __init__(self, label_columns: Sequence[str]) -> None:
        if isinstance(label_columns, str):
            raise ValueError("label_columns must be a list of column names, not a string")
        columns = tuple(label_columns)
        if not columns or not all(isinstance(c, str) and c for c in columns):
            raise ValueError(f"label_columns must be a non-empty list of column names, got {list(columns)!r}")
        if len(set(columns)) != len(columns):
            raise ValueError(f"label_columns must be unique, got {list(columns)!r}")
        self.label_columns = columns
        k = len(columns)
        self._count: IntArray = np.zeros(k, dtype=np.int64)
        self._label_mean: FloatArray = np.zeros(k)
        self._label_m2: FloatArray = np.zeros(k)
        self._sum_error: FloatArray = np.zeros(k)
        self._sum_squared_error: FloatArray = np.zeros(k)
        self._sum_absolute_error: FloatArray = np.zeros(k)

    def _matrix(self, values: npt.ArrayLike, what: str) -> FloatArray:
        a = _float_matrix(values, what)
        k = len(self.label_columns)
        if k == 1 and a.ndim == 1:
            a = a.reshape(-1, 1)
        if a.ndim != 2 or a.shape[1] != k:
            one = " or (n,)" if k == 1 else ""
            raise ValueError(
                f"{what} must have shape (n, {k}){one} for label columns {list(self.label_columns)}, "
                f"got {np.shape(values)}"
            )
        return a

    def update(self, labels: npt.ArrayLike, predictions: npt.ArrayLike, *, mask: npt.ArrayLike | None = None) -> Self:
        y = self._matrix(labels, "labels")
        p = self._matrix(predictions, "predictions")
        if p.shape[0] != y.shape[0]:
            raise ValueError(f"predictions has {p.shape[0]} rows but labels have {y.shape[0]}")
        n, k = y.shape
        keep: BoolArray | None = None
        if mask is None:
            _check_finite(y, "labels")
            _check_finite(p, "predictions")
            counts = np.full(k, n, dtype=np.int64)
        else:
            m = np.asarray(mask)
            if m.dtype != np.bool_:
                raise ValueError(f"mask must be a boolean array, got dtype {m.dtype}")
            if m.shape == (n,):
                m = np.broadcast_to(m[:, None], (n, k))
            elif m.shape != (n, k):
                raise ValueError(f"mask must have shape ({n},) or ({n}, {k}), got {m.shape}")
            keep = m
            _check_finite(y[keep], "labels")
            _check_finite(p[keep], "predictions")
            y = np.where(keep, y, 0.0)
            p = np.where(keep, p, 0.0)
            counts = np.count_nonzero(keep, axis=0).astype(np.int64)
        error = p - y
        mean = np.divide(y.sum(axis=0), counts, out=np.zeros(k), where=counts > 0)
        deviation = y - mean
        if keep is not None:
            deviation = np.where(keep, deviation, 0.0)
        self._absorb(
            counts,
            mean,
            np.einsum("ij,ij->j", deviation, deviation),
            error.sum(axis=0),
            np.einsum("ij,ij->j", error, error),
            np.abs(error).sum(axis=0),
        )
        return self

    def _absorb(
        self,
        count: IntArray,
        label_mean: FloatArray,
        label_m2: FloatArray,
        sum_error: FloatArray,
        sum_squared_error: FloatArray,
        sum_absolute_error: FloatArray,
    ) -> None:
        total = self._count + count
        share = np.divide(count, total, out=np.zeros(total.size), where=total > 0)
        delta = label_mean - self._label_mean
        self._label_m2 = self._label_m2 + label_m2 + delta * delta * self._count * share
        self._label_mean = self._label_mean + delta * share
        self._count = total
        self._sum_error = self._sum_error + sum_error
        self._sum_squared_error = self._sum_squared_error + sum_squared_error
        self._sum_absolute_error = self._sum_absolute_error + sum_absolute_error

    def merge(self, other: MetricState) -> Self:
        self._check_mergeable(other)
        assert isinstance(other, RegressionState)
        if other.label_columns != self.label_columns:
            raise ValueError(
                f"mismatched label_columns when merging: {list(self.label_columns)} vs {list(other.label_columns)}"
            )
        self._absorb(*(getattr(other, f"_{name}") for name in self._SUMS))
        return self

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "version": STATE_VERSION, "label_columns": list(self.label_columns)}
        out.update({name: getattr(self, f"_{name}").tolist() for name in self._SUMS})
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Self:
        _require(d, cls.kind)
        columns = d.get("label_columns")
        if not isinstance(columns, list):
            raise ValueError(f"state field 'label_columns' must be a list, got {columns!r}")
        state = cls(columns)
        k = len(columns)
        for name in cls._SUMS:
            setattr(state, f"_{name}", _array_field(d, name, np.int64 if name == "count" else np.float64, (k,)))
        if (state._label_m2 < 0).any() or (state._sum_squared_error < 0).any() or (state._sum_absolute_error < 0).any():
            raise ValueError("regression state holds negative sums of squares or absolute values")
        return state

    def result(self) -> dict[str, Any]:
        columns: dict[str, dict[str, Any]] = {}
        for j, name in enumerate(self.label_columns):
            n = int(self._count[j])
            sse = float(self._sum_squared_error[j])
            sst = float(self._label_m2[j])
            metrics: dict[str, Any] = {
                "count": n,
                "mse": None,
                "rmse": None,
                "mae": None,
                "r2": None,
                "mean_error": None,
            }
            if n > 0:
                mse = sse / n
                metrics.update(
                    mse=mse,
                    rmse=math.sqrt(mse),
                    mae=float(self._sum_absolute_error[j]) / n,
                    mean_error=float(self._sum_error[j]) / n,
                )
            if n >= 2:
                metrics["r2"] = 1.0 - sse / sst if sst > 0 else (1.0 if sse == 0 else 0.0)
            columns[name] = metrics
        out: dict[str, Any] = {"columns": columns}
        if len(columns) == 1:  # API.md: {"regression": {"mse", "mae", "rmse", "r2", ...}}
            out.update(next(iter(columns.values())))
        elif len(columns) > 1:
            out["average"] = {
                key: _mean_of_defined(c[key] for c in columns.values())
                for key in ("mse", "rmse", "mae", "r2", "mean_error")
            }
        return out
