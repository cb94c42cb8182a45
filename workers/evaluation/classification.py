"""Single-label classification metrics (DL4J's ``Evaluation``): confusion matrix, precision, recall and F1 per
class with macro, micro and weighted averages, and top-k accuracy, in the mergeable :class:`ClassificationState`.

Only stdlib and numpy are imported: this module runs inside Spark executors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from workers.evaluation.base import (
    STATE_VERSION,
    FloatArray,
    IntArray,
    MetricState,
    _array_field,
    _check_finite,
    _check_num_classes,
    _class_indices,
    _column,
    _float_matrix,
    _require,
    _row_mask,
)

DEFAULT_TOP_K = (1, 5)


def _class_scores(probabilities: npt.ArrayLike, num_classes: int, n: int) -> FloatArray:
    """(n, C) scores; for C == 2 a single column of P(class 1) becomes ``[1 - p, p]``."""
    p = _float_matrix(probabilities, "probabilities")
    if p.ndim == 2 and p.shape[1] == num_classes:
        scores = p
    elif num_classes == 2 and (p.ndim == 1 or (p.ndim == 2 and p.shape[1] == 1)):
        p1 = p.reshape(-1)
        scores = np.column_stack((1.0 - p1, p1))
    else:
        also = " or (n,) / (n, 1) holding P(class 1)" if num_classes == 2 else ""
        raise ValueError(f"probabilities must have shape (n, {num_classes}){also}, got {p.shape}")
    if scores.shape[0] != n:
        raise ValueError(f"probabilities has {scores.shape[0]} rows but labels have {n}")
    return scores


def _divide(numerator: FloatArray, denominator: FloatArray) -> FloatArray:
    """Elementwise ratio with 0.0 where the denominator is 0 (sklearn's ``zero_division=0``)."""
    return np.divide(numerator, denominator, out=np.zeros_like(numerator, dtype=np.float64), where=denominator != 0)


@dataclass
class _WeightedCounts:
    confusion: FloatArray
    top_k_hits: FloatArray
    top_k_rows: float


class ClassificationState(MetricState):
    """Confusion matrix and top-k hits of single-label classification (DL4J's ``Evaluation``).

    ``update`` takes int labels (n,) and either

    - ``probabilities``: (n, C) scores per class (probabilities, or any scores whose argmax is the decision);
      for C == 2 also (n,) or (n, 1) holding P(class 1), read as ``[1 - p, p]``; the predicted class is the
      argmax, ties going to the lowest class index (so binary P(class 1) predicts 1 only when p > 0.5), or
    - ``predictions``: (n,) hard predicted class indices (e.g. Spark ML's ``prediction`` column),

    or both (the confusion matrix then uses ``predictions`` and top-k uses ``probabilities``). Only rows with
    probabilities count toward ``top_k_accuracy`` (``top_k_count`` says how many). The rank of the true class
    breaks ties toward the lower class index like argmax, so ``top_k_accuracy["1"] == accuracy`` when every row
    had probabilities and no ``predictions`` were given (sklearn's ``top_k_accuracy_score`` breaks ties the
    other way). Labels and predictions may be whole-valued floats (Spark's double columns).

    ``weights`` (n,) >= 0 weight the rows; once any batch had weights the state also keeps float weighted
    counts (earlier and later unweighted rows weigh 1) and every metric except ``count`` and
    ``confusion_matrix`` uses them. ``mask`` (n,) bool keeps only the rows where it is True; rows it drops are
    not validated either, so padding rows may hold anything.

    Precision of a class that was never predicted and recall of a class with no support are 0.0, as are
    F1 scores with a zero denominator (sklearn's ``zero_division=0``). Macro averages run over all
    ``num_classes`` classes, absent ones included (sklearn with ``labels=range(C)``); the weighted average
    weighs by support. ``accuracy`` and ``top_k_accuracy`` are None when no rows (or no weight) were counted.
    Top-k is kept for each requested k <= C; larger k are dropped.
    """

    kind = "classification"

    def __init__(self, num_classes: int, top_k: Sequence[int] = DEFAULT_TOP_K) -> None:
        self.num_classes = _check_num_classes(num_classes)
        ks: set[int] = set()
        for k in top_k:
            if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
                raise ValueError(f"top_k values must be integers >= 1, got {k!r}")
            if k <= self.num_classes:
                ks.add(int(k))
        self.top_k: tuple[int, ...] = tuple(sorted(ks))
        c = self.num_classes
        self._confusion: IntArray = np.zeros((c, c), dtype=np.int64)
        self._top_k_hits: IntArray = np.zeros(len(self.top_k), dtype=np.int64)
        self._top_k_rows = 0
        self._weighted: _WeightedCounts | None = None

    def update(
        self,
        labels: npt.ArrayLike,
        probabilities: npt.ArrayLike | None = None,
        *,
        predictions: npt.ArrayLike | None = None,
        weights: npt.ArrayLike | None = None,
        mask: npt.ArrayLike | None = None,
    ) -> Self:
        c = self.num_classes
        y = _column(labels, None, "labels")
        n = y.shape[0]
        if probabilities is None and predictions is None:
            raise ValueError("pass probabilities (scores per class), predictions (class indices) or both")
        scores = None if probabilities is None else _class_scores(probabilities, c, n)
        predicted = None if predictions is None else _column(predictions, n, "predictions")
        w = None if weights is None else _float_matrix(_column(weights, n, "weights"), "weights")
        keep = _row_mask(mask, n)
        if keep is not None:
            y = y[keep]
            scores = None if scores is None else scores[keep]
            predicted = None if predicted is None else predicted[keep]
            w = None if w is None else w[keep]
        y = _class_indices(y, c, "labels")
        if scores is not None:
            _check_finite(scores, "probabilities")
        if w is not None:
            _check_finite(w, "weights")
            if w.size and w.min() < 0:
                raise ValueError(f"weights must be >= 0, got {float(w.min())!r}")
        if predicted is not None:
            pred = _class_indices(predicted, c, "predictions")
        else:
            assert scores is not None
            pred = np.argmax(scores, axis=1).astype(np.int64)

        if w is not None and self._weighted is None:
            self._start_weighting()
        cells = y * c + pred
        counts = np.bincount(cells, minlength=c * c).reshape(c, c)
        self._confusion += counts
        ranks = None
        k_index = np.asarray(self.top_k, dtype=np.int64) - 1
        if scores is not None:
            ranks = _true_class_rank(scores, y)
            self._top_k_hits += np.cumsum(np.bincount(ranks, minlength=c))[k_index]
            self._top_k_rows += int(y.size)
        if self._weighted is not None:
            wc = self._weighted
            if w is None:
                wc.confusion += counts
                if ranks is not None:
                    wc.top_k_hits += np.cumsum(np.bincount(ranks, minlength=c))[k_index]
                    wc.top_k_rows += float(y.size)
            else:
                wc.confusion += np.bincount(cells, weights=w, minlength=c * c).reshape(c, c)
                if ranks is not None:
                    # the total is the last cumulative sum, so top-C hits equal the rows bit for bit
                    weighted_hits = np.cumsum(np.bincount(ranks, weights=w, minlength=c))
                    wc.top_k_hits += weighted_hits[k_index]
                    wc.top_k_rows += float(weighted_hits[-1])
        return self

    def _start_weighting(self) -> None:
        """Weighted counts from here on; every row counted so far weighs 1."""
        self._weighted = _WeightedCounts(
            self._confusion.astype(np.float64), self._top_k_hits.astype(np.float64), float(self._top_k_rows)
        )

    def merge(self, other: MetricState) -> Self:
        self._check_mergeable(other)
        assert isinstance(other, ClassificationState)
        if other.num_classes != self.num_classes:
            raise ValueError(f"mismatched num_classes when merging: {self.num_classes} vs {other.num_classes}")
        if other.top_k != self.top_k:
            raise ValueError(f"mismatched top_k when merging: {list(self.top_k)} vs {list(other.top_k)}")
        if other._weighted is not None and self._weighted is None:
            self._start_weighting()
        if self._weighted is not None:
            wc = self._weighted
            if other._weighted is None:
                wc.confusion += other._confusion
                wc.top_k_hits += other._top_k_hits
                wc.top_k_rows += float(other._top_k_rows)
            else:
                wc.confusion += other._weighted.confusion
                wc.top_k_hits += other._weighted.top_k_hits
                wc.top_k_rows += other._weighted.top_k_rows
        self._confusion += other._confusion
        self._top_k_hits += other._top_k_hits
        self._top_k_rows += other._top_k_rows
        return self

    def to_dict(self) -> dict[str, Any]:
        wc = self._weighted
        return {
            "kind": self.kind,
            "version": STATE_VERSION,
            "num_classes": self.num_classes,
            "top_k": list(self.top_k),
            "confusion": self._confusion.tolist(),
            "top_k_hits": self._top_k_hits.tolist(),
            "top_k_rows": self._top_k_rows,
            "weighted": None
            if wc is None
            else {
                "confusion": wc.confusion.tolist(),
                "top_k_hits": wc.top_k_hits.tolist(),
                "top_k_rows": wc.top_k_rows,
            },
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Self:
        _require(d, cls.kind)
        state = cls(d.get("num_classes"), d.get("top_k", ()))  # type: ignore[arg-type]
        if list(state.top_k) != list(d.get("top_k", ())):
            raise ValueError(f"state field 'top_k' must be sorted, unique and <= num_classes, got {d.get('top_k')!r}")
        c, k = state.num_classes, len(state.top_k)
        state._confusion = _array_field(d, "confusion", np.int64, (c, c))
        state._top_k_hits = _array_field(d, "top_k_hits", np.int64, (k,))
        state._top_k_rows = int(_array_field(d, "top_k_rows", np.int64, ()))
        weighted = d.get("weighted")
        if weighted is not None:
            state._weighted = _WeightedCounts(
                _array_field(weighted, "confusion", np.float64, (c, c)),
                _array_field(weighted, "top_k_hits", np.float64, (k,)),
                float(_array_field(weighted, "top_k_rows", np.float64, ())),
            )
        return state

    def result(self) -> dict[str, Any]:
        wc = self._weighted
        m = (self._confusion if wc is None else wc.confusion).astype(np.float64)
        tp = np.diag(m).copy()
        predicted = m.sum(axis=0)
        support = m.sum(axis=1)
        total = float(support.sum())
        precision = _divide(tp, predicted)
        recall = _divide(tp, support)
        f1 = _divide(2.0 * tp, predicted + support)
        micro = float(tp.sum()) / total if total > 0 else 0.0

        def weighted_average(values: FloatArray) -> float:
            return float(np.dot(values, support)) / total if total > 0 else 0.0

        if wc is None:
            hits: np.ndarray = self._top_k_hits
            rows: float = float(self._top_k_rows)
        else:
            hits, rows = wc.top_k_hits, wc.top_k_rows
        out: dict[str, Any] = {
            "num_classes": self.num_classes,
            "count": int(self._confusion.sum()),
            "accuracy": micro if total > 0 else None,
            "precision": precision.tolist(),
            "recall": recall.tolist(),
            "f1": f1.tolist(),
            "support": self._confusion.sum(axis=1).tolist() if wc is None else support.tolist(),
            "macro": {"precision": float(precision.mean()), "recall": float(recall.mean()), "f1": float(f1.mean())},
            "micro": {"precision": micro, "recall": micro, "f1": micro},
            "weighted": {
                "precision": weighted_average(precision),
                "recall": weighted_average(recall),
                "f1": weighted_average(f1),
            },
            "confusion_matrix": self._confusion.tolist(),
            "top_k_accuracy": {
                str(k): (float(h) / rows if rows > 0 else None) for k, h in zip(self.top_k, hits.tolist(), strict=True)
            },
            "top_k_count": self._top_k_rows,
        }
        if wc is not None:
            out["weight_total"] = total
            out["weighted_confusion_matrix"] = wc.confusion.tolist()
        return out


def _true_class_rank(scores: FloatArray, labels: IntArray) -> IntArray:
    """Position of the true class in a descending sort of each row, ties ordered by class index (0 = argmax)."""
    true_score = np.take_along_axis(scores, labels[:, None], axis=1)
    ahead = (scores > true_score) | ((scores == true_score) & (np.arange(scores.shape[1]) < labels[:, None]))
    return np.count_nonzero(ahead, axis=1).astype(np.int64)
