"""The answer shape every model family gives for predictions (pure numpy: torch and xgboost models share it)."""

from __future__ import annotations

from typing import Any

import numpy as np


def prediction_answer(
    out: np.ndarray, *, classification: bool, labels: list[Any] | None, as_lists: bool
) -> dict[str, Any]:
    """From model outputs (class probabilities, P(class 1) as one column, or values): ``class_index``, ``label``
    and ``probabilities`` for classification, ``prediction`` for regression (a row of values per row when there
    are several label columns). ``as_lists=False`` keeps numpy arrays (for a serializer that writes them)."""
    if not classification:
        values = out[:, 0] if out.ndim == 2 and out.shape[1] == 1 else out
        return {"prediction": values.tolist() if as_lists else values}
    probabilities = np.concatenate([1 - out, out], axis=1) if out.shape[-1] == 1 else out
    index = probabilities.argmax(axis=-1)
    named = [labels[i] for i in index.tolist()] if labels else (index.tolist() if as_lists else index)
    if not as_lists:
        return {"class_index": index, "label": named, "probabilities": probabilities}
    return {"class_index": index.tolist(), "label": named, "probabilities": probabilities.tolist()}
