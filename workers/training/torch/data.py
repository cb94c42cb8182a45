"""A barrier task's rows as tensors: Arrow batches -> numpy -> torch, with no per-row Python.

Executor-side: stdlib, numpy, pyarrow, torch only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from workers.training.torch.config import DataLayout


@dataclass(frozen=True)
class Split:
    x: torch.Tensor
    """float32, (rows, *input_shape)"""
    y: torch.Tensor
    """int64 (rows,) class indices, or float32 (rows, label width)"""

    def __len__(self) -> int:
        return int(self.x.shape[0])


def _features(table: pa.Table, layout: DataLayout) -> np.ndarray:
    width = int(np.prod(layout.input_shape))
    if layout.array_column:
        column = table.column(layout.features[0]).combine_chunks()
        values = column.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
        lengths = np.diff(column.offsets.to_numpy())
        bad = np.flatnonzero(lengths != width)
        if bad.size:
            raise ValueError(
                f"column {layout.features[0]!r}: row {int(bad[0])} has {int(lengths[bad[0]])} values, "
                f"input_shape {list(layout.input_shape)} needs {width}"
            )
        return values.reshape(len(column), width)
    columns = [table.column(c).to_numpy().astype(np.float32, copy=False) for c in layout.features]
    return np.stack(columns, axis=1) if columns else np.zeros((table.num_rows, 0), np.float32)


def _labels(table: pa.Table, layout: DataLayout) -> np.ndarray:
    raw = table.column(layout.label).to_numpy()
    if layout.task == "classification":
        labels = raw.astype(np.int64)
        if layout.num_classes is not None and labels.size and (labels.min() < 0 or labels.max() >= layout.num_classes):
            raise ValueError(f"label {layout.label!r} has values outside 0..{layout.num_classes - 1}")
        return labels
    return raw.astype(np.float32).reshape(-1, 1)


def to_splits(batches: Iterable[pa.RecordBatch], layout: DataLayout) -> tuple[Split, Split]:
    """(training rows, validation rows) of this task, sorted by the stable row id so reruns see the same order."""
    batch_list = list(batches)
    table = pa.Table.from_batches(batch_list) if batch_list else None
    if table is None or table.num_rows == 0:
        empty = Split(torch.zeros((0, *layout.input_shape)), torch.zeros(0))
        return empty, empty
    table = table.sort_by(layout.order_column)
    x = _features(table, layout).reshape(-1, *layout.input_shape)
    y = _labels(table, layout)
    is_val = table.column(layout.split_column).to_numpy().astype(bool)
    train, val = ~is_val, is_val
    return (
        Split(torch.from_numpy(np.ascontiguousarray(x[train])), torch.from_numpy(np.ascontiguousarray(y[train]))),
        Split(torch.from_numpy(np.ascontiguousarray(x[val])), torch.from_numpy(np.ascontiguousarray(y[val]))),
    )
