"""Arrow rows -> model inputs (and labels) for evaluation and prediction, marking bad rows instead of failing.

Evaluation counts bad rows inside its one pass over the data (so several metric groups still read the data
once); the caller applies the fail/skip policy to the merged count. Executor-side: numpy and pyarrow only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class Columns:
    features: tuple[str, ...]
    array_column: bool
    width: int
    """Values per row: the number of feature columns, or the array column's length."""
    labels: tuple[str, ...] = ()
    classification: bool = False
    num_classes: int | None = None
    class_labels: tuple[Any, ...] | None = None
    """String class labels in index order: a label column of strings is mapped through them."""


def features(table: pa.Table, cols: Columns) -> tuple[np.ndarray, np.ndarray]:
    """(float32 (n, width), bad (n,)): a row is bad if a value is null, NaN or infinite or an array has the wrong
    length; its values are zeroed so a model can still run on the batch."""
    n = table.num_rows
    if cols.array_column:
        column = table.column(cols.features[0]).combine_chunks()
        lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
        bad = lengths != cols.width
        good = pc.filter(column, pa.array(~bad))
        values = good.flatten().to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        x = np.zeros((n, cols.width), dtype=np.float64)
        x[~bad] = values.reshape(-1, cols.width) if values.size else x[~bad]
    else:
        x = np.stack(
            [table.column(c).to_numpy(zero_copy_only=False).astype(np.float64) for c in cols.features], axis=1
        ) if cols.features else np.zeros((n, 0))  # fmt: skip
        bad = np.zeros(n, dtype=bool)
    bad |= ~np.isfinite(x).all(axis=1)
    x[bad] = 0.0
    return x.astype(np.float32), bad


def labels(table: pa.Table, cols: Columns) -> tuple[np.ndarray, np.ndarray]:
    """(labels, bad): class indices int64 (n,) or float64 (n, k); bad for null/NaN or a class outside range."""
    if cols.classification:
        raw = table.column(cols.labels[0]).combine_chunks()
        if cols.class_labels is not None:
            lookup = pa.array([str(v) for v in cols.class_labels])
            index = pc.index_in(pc.cast(raw, pa.string()), value_set=lookup)
            values = pc.fill_null(index, -1).to_numpy(zero_copy_only=False).astype(np.float64)
        else:
            values = raw.to_numpy(zero_copy_only=False).astype(np.float64)
        bad = ~np.isfinite(values) | (values < 0) | (values != np.floor(values))
        if cols.num_classes is not None:
            bad |= values >= cols.num_classes
        values[bad] = 0
        return values.astype(np.int64), bad
    y = np.stack([table.column(c).to_numpy(zero_copy_only=False).astype(np.float64) for c in cols.labels], axis=1)
    bad = ~np.isfinite(y).all(axis=1)
    y[bad] = 0.0
    return y, bad
