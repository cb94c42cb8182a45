"""Sequence datasets, executor side (:func:`pad_batch`): Arrow -> padded numpy arrays and masks, vectorised over
the Arrow list offsets. stdlib, numpy and pyarrow only (no torch: the trainer wraps the arrays).

Alignment and padding conventions (``spec.alignment``, DataVec's ``AlignmentMode``):

* ``ALIGN_START``: features and labels both start at step 0 of the sequence; the shorter one is padded at its
  end. In a padded batch the real steps sit at the START of the time axis (indices ``0 .. len-1``).
* ``ALIGN_END``: the last feature step and the last label step coincide; the shorter one is padded at its start.
  In a padded batch the real steps sit at the END of the time axis: the last real step of every sequence is at
  index ``T-1``, for features and labels alike (the many-to-one case reads the output at ``T-1``).
* ``EQUAL_LENGTH``: per-step labels must have as many steps as the features (a mismatch fails the job naming the
  sequence ids); padded like ``ALIGN_START``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from workers.data.sequences.spec import BAD, EXAMPLES, LENGTH, SEQUENCE_ID, Alignment, SequenceSpec, X, Y


@dataclass(frozen=True)
class SequenceArrays:
    """A padded batch. Padding is 0 (False in the masks); see the module docstring for where real steps sit."""

    x: np.ndarray
    """float32 (n, T, F)"""
    feature_mask: np.ndarray
    """bool (n, T): True on real feature steps"""
    y: np.ndarray
    """last_step: (n,); per_step: (n, T). int64 class indices or float32 values."""
    label_mask: np.ndarray | None
    """per_step: bool (n, T), True where a label exists; None for last_step labels (one per sequence)."""
    lengths: np.ndarray
    """int64 (n,): steps of each aligned sequence (the ``_len`` column)"""
    sequence_id: np.ndarray | None
    """the ``sequence_id`` column when the batch has one"""
    alignment: Alignment

    def __len__(self) -> int:
        return int(self.x.shape[0])

    @property
    def last_index(self) -> np.ndarray:
        """int64 (n,): time index of each sequence's last real feature step (where a many-to-one model reads its
        output): ``T-1`` for ALIGN_END, ``feature steps - 1`` otherwise (-1 for an empty batch row)."""
        n, t = self.feature_mask.shape
        if self.alignment == "ALIGN_END":
            return np.full(n, t - 1, dtype=np.int64)
        return self.feature_mask.sum(axis=1).astype(np.int64) - 1


def pad_batch(
    table_or_batches: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch],
    spec: SequenceSpec,
    *,
    pad_to: int | None = None,
) -> SequenceArrays:
    """Pad the sequences of ``to_sequence_frame`` rows (as Arrow) to ``T`` steps: the longest sequence, or
    ``pad_to`` (an error when a sequence is longer: truncation is ``max_length``'s job, on the driver).

    No per-row Python: the (sequence, time) index of every step comes from the Arrow list offsets, and one
    fancy-indexed assignment scatters all steps. Raises ValueError on rows marked bad, nulls, steps of unequal
    width, class labels outside ``0..num_classes-1`` and (EQUAL_LENGTH) per-step labels of another length.
    """
    table = _as_table(table_or_batches)
    names = set(table.column_names)
    if X not in names or Y not in names:
        raise ValueError(f"a sequence batch needs columns {X} and {Y}; got {', '.join(table.column_names)}")
    # Copies, not zero-copy views of Arrow buffers: torch.from_numpy wants writable arrays.
    ids = np.array(table.column(SEQUENCE_ID).to_numpy(zero_copy_only=False)) if SEQUENCE_ID in names else None
    if BAD in names:
        bad = table.column(BAD)
        if bad.null_count != len(bad):
            raise ValueError(f"{len(bad) - bad.null_count} sequences in the batch are marked bad: drop them first")
    x_col = _list_column(table, X)
    n = len(x_col)
    lx = np.diff(np.asarray(x_col.offsets, dtype=np.int64))
    steps = x_col.flatten()  # the step lists of this (possibly sliced) array only
    if steps.null_count:
        raise ValueError(f"{X} has null steps")
    widths = np.diff(np.asarray(steps.offsets, dtype=np.int64))
    values = steps.flatten()
    if values.null_count:
        raise ValueError(f"{X} has null values")
    width = spec.width if spec.width is not None else (int(widths[0]) if widths.size else 0)
    odd = np.flatnonzero(widths != width)
    if odd.size:
        raise ValueError(f"{X}: a step has {int(widths[odd[0]])} values, expected {width} features per step")
    x_flat = values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(len(widths), width)

    y_type = np.int64 if spec.task == "classification" else np.float32
    if spec.labels == "per_step":
        y_col = _list_column(table, Y)
        ly = np.diff(np.asarray(y_col.offsets, dtype=np.int64))
        y_values = y_col.flatten()
        if y_values.null_count:
            raise ValueError(f"{Y} has null labels")
        y_flat = y_values.to_numpy(zero_copy_only=False)
        if spec.alignment == "EQUAL_LENGTH" and np.any(lx != ly):
            odd = np.flatnonzero(lx != ly)[:EXAMPLES]
            which = [ids[i] if ids is not None else f"row {i}" for i in odd]
            raise ValueError(f"EQUAL_LENGTH: feature and label steps differ for sequences {which}")
        lengths = np.maximum(lx, ly)
    else:
        y_arr = table.column(Y)
        if y_arr.null_count:
            raise ValueError(f"{Y} has null labels")
        y_flat = y_arr.to_numpy()
        ly = None
        lengths = lx
    y_flat = _check_labels(y_flat, spec).astype(y_type)  # a copy (see ids)

    if LENGTH in names:
        declared = table.column(LENGTH).to_numpy(zero_copy_only=False).astype(np.int64)
        if not np.array_equal(declared, lengths):
            raise ValueError(f"{LENGTH} disagrees with the steps in {X}/{Y}: was the frame made with another spec?")
    longest = int(lengths.max()) if n else 0
    if pad_to is not None and pad_to < longest:
        raise ValueError(f"pad_to={pad_to} but a sequence has {longest} steps (set max_length to truncate)")
    t = longest if pad_to is None else pad_to

    x = np.zeros((n, t, width), dtype=np.float32)
    feature_mask = np.zeros((n, t), dtype=bool)
    rows, times = _step_index(lx, t, spec.alignment)
    x[rows, times] = x_flat
    feature_mask[rows, times] = True
    if ly is None:
        return SequenceArrays(x, feature_mask, y_flat, None, lengths, ids, spec.alignment)
    y = np.zeros((n, t), dtype=y_type)
    label_mask = np.zeros((n, t), dtype=bool)
    rows, times = _step_index(ly, t, spec.alignment)
    y[rows, times] = y_flat
    label_mask[rows, times] = True
    return SequenceArrays(x, feature_mask, y, label_mask, lengths, ids, spec.alignment)


def _as_table(data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch]) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    batches = list(data)
    if not batches:
        raise ValueError("no record batches (and so no schema): pass an empty Table instead")
    return pa.Table.from_batches(batches)


def _list_column(table: pa.Table, name: str) -> pa.Array:
    column = table.column(name)
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        raise ValueError(f"column {name} is {column.type}, expected a list (check the spec's labels setting)")
    array = column.combine_chunks()
    if array.null_count:
        raise ValueError(f"column {name} has null rows")
    return array


def _step_index(lengths: np.ndarray, t: int, alignment: Alignment) -> tuple[np.ndarray, np.ndarray]:
    """(row, time) of every step of ragged sequences of these lengths, flattened in order: ALIGN_END puts the
    last step of each at ``t-1``, the other modes the first at 0."""
    total = int(lengths.sum())
    rows = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    starts = np.cumsum(lengths) - lengths
    position = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
    if alignment == "ALIGN_END":
        position += np.repeat(t - lengths, lengths)
    return rows, position


def _check_labels(labels: np.ndarray, spec: SequenceSpec) -> np.ndarray:
    if spec.task != "classification" or labels.size == 0:
        return labels
    if labels.dtype.kind == "f" and not np.all(np.isfinite(labels) & (labels == np.floor(labels))):
        raise ValueError(f"{Y}: class labels must be whole numbers")
    if labels.min() < 0 or (spec.num_classes is not None and labels.max() >= spec.num_classes):
        limit = f"0..{spec.num_classes - 1}" if spec.num_classes is not None else "0 and above"
        raise ValueError(f"{Y}: class labels outside {limit}")
    return labels
