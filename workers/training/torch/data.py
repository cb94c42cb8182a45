"""A barrier task's rows as tensors: Arrow batches -> numpy -> torch, with no per-row Python.

Executor-side: stdlib, numpy, pyarrow, torch only.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from workers.data.normalize import Normalizer
from workers.data.sequences.pad import SequenceArrays, pad_batch
from workers.data.sequences.spec import SequenceSpec
from workers.training.torch.config import DataLayout


@dataclass(frozen=True)
class Split:
    x: torch.Tensor
    """float32, (rows, *input_shape)"""
    y: torch.Tensor
    """int64 (rows,) class indices, or float32 (rows, label width)"""
    w: torch.Tensor | None = None
    """float32 (rows,) per-row loss weights, when the dataset has a weight column"""
    lengths: torch.Tensor | None = None
    """int64 (rows,) real steps of each sequence; its steps sit at 0..length-1 (padding after them)"""
    mask: torch.Tensor | None = None
    """bool (rows, steps): which per-step labels exist (per_step sequence labels)"""

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


def to_splits(batches: Iterable[pa.RecordBatch], layout: DataLayout, rank: int = 0) -> tuple[Split, Split]:
    """(training rows, validation rows) of this task, sorted by the stable row id so reruns see the same order.
    With ``layout.source`` the batches are placeholders and the task reads its share of the files."""
    return checked_splits(batches, layout, rank, None)[:2]


def checked_splits(
    batches: Iterable[pa.RecordBatch],
    layout: DataLayout,
    rank: int,
    all_gather: Callable[[str], list[str]] | None,
) -> tuple[Split, Split, dict[str, int] | None]:
    """:func:`to_splits`, and the job's row counts when the tasks check their rows themselves (a source with
    ``check``: :func:`workers.data.arrow_read.check_share`, which raises ``DataFailure`` on every rank alike)."""
    batch_list = list(batches)
    counts = None
    if layout.source is not None:
        from workers.data.arrow_read import check_share, read_share

        share = read_share(layout.source, rank, layout.split_column, layout.order_column)
        if layout.source.get("check") is not None:
            assert all_gather is not None, "a task that checks its rows shares the counts"
            counts = check_share(share, layout.source, layout.split_column, all_gather)
        batch_list = share.to_batches()
    return (*_splits(batch_list, layout), counts)


def _splits(batch_list: list[pa.RecordBatch], layout: DataLayout) -> tuple[Split, Split]:
    table = pa.Table.from_batches(batch_list) if batch_list else None
    if table is None or table.num_rows == 0:
        empty = Split(torch.zeros((0, *layout.input_shape)), torch.zeros(0))
        return empty, empty
    if layout.source is None:  # a task's own read of the files is in row order already
        table = table.sort_by(layout.order_column)
    if layout.sequence is not None:
        return _sequence_splits(table, layout)
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


def start_aligned(arrays: SequenceArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Move each sequence's steps to the start of the time axis (padding after them), keeping features and labels
    in the same relative position: a recurrent layer's output at step L-1 then never depends on padding."""
    steps = arrays.x.shape[1]
    occupied = arrays.lengths  # ALIGN_END puts them in the last `occupied` steps, the others in the first
    shift = steps - occupied if arrays.alignment == "ALIGN_END" else np.zeros_like(occupied)
    index = (np.arange(steps)[None, :] + shift[:, None]) % max(steps, 1)
    rows = np.arange(len(index))[:, None]
    x = arrays.x[rows, index]
    y = arrays.y[rows, index] if arrays.y.ndim == 2 else arrays.y
    mask = arrays.label_mask[rows, index] if arrays.label_mask is not None else None
    return x, y, mask


def _sequence_splits(table: pa.Table, layout: DataLayout) -> tuple[Split, Split]:
    assert layout.sequence is not None
    spec = SequenceSpec.from_dict(layout.sequence)
    is_val = table.column(layout.split_column).to_numpy().astype(bool)

    def part(rows: np.ndarray) -> Split:
        arrays = pad_batch(table.filter(pa.array(rows)), spec)
        x, y, mask = start_aligned(arrays)
        lengths = np.minimum(arrays.lengths, x.shape[1])
        return Split(
            torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)),
            torch.from_numpy(np.ascontiguousarray(y)),
            lengths=torch.from_numpy(lengths.astype(np.int64)),
            mask=torch.from_numpy(np.ascontiguousarray(mask)) if mask is not None else None,
        )

    return part(~is_val), part(is_val)


def _shard(directory: Path, rank: int) -> Path:
    return directory / f"rank-{rank}.npz"


def save_splits(directory: Path, rank: int, train: Split, val: Split) -> None:
    """DL4J's Export: this rank's ready tensors, written once (atomically) for later jobs to reuse."""
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {"x": train.x.numpy(), "y": train.y.numpy(), "vx": val.x.numpy(), "vy": val.y.numpy()}
    # a sequence split's lengths and per-step label mask travel too: without them a later job would train on the
    # padding as if it were data
    for prefix, split in (("", train), ("v", val)):
        for name in ("w", "lengths", "mask"):
            value = getattr(split, name)
            if value is not None:
                arrays[prefix + name] = value.numpy()
    # a name of its own: two jobs on the same data (a tune's parallel trials) may write the same shard at once
    tmp = directory / f".rank-{rank}.{os.getpid()}.{threading.get_ident()}.tmp.npz"
    try:
        np.savez(tmp, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, _shard(directory, rank))
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class ExportWriter:
    """:func:`save_splits` on a thread of its own, started at once: the rank trains while its export is written.
    :meth:`join` waits for it and returns what went wrong, if anything (the export is a cache: a job whose export
    failed still trains; the driver then marks no export complete)."""

    def __init__(self, directory: Path, rank: int, train: Split, val: Split) -> None:
        self.error: str | None = None
        self._thread = threading.Thread(
            target=self._write, args=(directory, rank, train, val), name="export-writer", daemon=True
        )
        self._thread.start()

    def _write(self, directory: Path, rank: int, train: Split, val: Split) -> None:
        try:
            save_splits(directory, rank, train, val)
        except Exception as exc:  # any failure only costs the export; the job says which
            self.error = f"rank {rank} could not write {directory}: {type(exc).__name__}: {exc}"

    def join(self) -> str | None:
        self._thread.join()
        return self.error


def load_splits(directory: Path, rank: int) -> tuple[Split, Split]:
    with np.load(_shard(directory, rank), allow_pickle=False) as shard:

        def get(name: str) -> torch.Tensor | None:
            return torch.from_numpy(shard[name]) if name in shard.files else None

        def split(prefix: str) -> Split:
            x, y = torch.from_numpy(shard[prefix + "x"]), torch.from_numpy(shard[prefix + "y"])
            return Split(x, y, get(prefix + "w"), lengths=get(prefix + "lengths"), mask=get(prefix + "mask"))

        return split(""), split("v")
