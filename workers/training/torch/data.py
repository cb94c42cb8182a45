"""A barrier task's rows as tensors: Arrow batches -> numpy -> torch, with no per-row Python.

Executor-side: stdlib, numpy, pyarrow, torch only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from workers.data.normalize import Normalizer
from workers.training.torch.config import DataLayout


@dataclass(frozen=True)
class Split:
    x: torch.Tensor
    """float32, (rows, *input_shape)"""
    y: torch.Tensor
    """int64 (rows,) class indices, or float32 (rows, label width)"""
    w: torch.Tensor | None = None
    """float32 (rows,) per-row loss weights, when the dataset has a weight column"""

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
    if layout.task == "classification":
        labels = table.column(layout.labels[0]).to_numpy().astype(np.int64)
        if layout.num_classes is not None and labels.size and (labels.min() < 0 or labels.max() >= layout.num_classes):
            raise ValueError(f"label {layout.labels[0]!r} has values outside 0..{layout.num_classes - 1}")
        return labels
    return np.stack([table.column(c).to_numpy().astype(np.float32) for c in layout.labels], axis=1)


def to_splits(batches: Iterable[pa.RecordBatch], layout: DataLayout) -> tuple[Split, Split]:
    """(training rows, validation rows) of this task, sorted by the stable row id so reruns see the same order."""
    batch_list = list(batches)
    table = pa.Table.from_batches(batch_list) if batch_list else None
    if table is None or table.num_rows == 0:
        empty = Split(torch.zeros((0, *layout.input_shape)), torch.zeros(0))
        return empty, empty
    table = table.sort_by(layout.order_column)
    x = _features(table, layout)
    if layout.normalizer is not None:
        x = Normalizer.from_dict(layout.normalizer).apply(x)
    x = x.reshape(-1, *layout.input_shape)
    y = _labels(table, layout)
    w = table.column(layout.weight).to_numpy().astype(np.float32) if layout.weight else None
    is_val = table.column(layout.split_column).to_numpy().astype(bool)

    def part(rows: np.ndarray) -> Split:
        return Split(
            torch.from_numpy(np.ascontiguousarray(x[rows])),
            torch.from_numpy(np.ascontiguousarray(y[rows])),
            torch.from_numpy(np.ascontiguousarray(w[rows])) if w is not None else None,
        )

    return part(~is_val), part(is_val)
