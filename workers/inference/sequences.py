"""Evaluation and prediction of sequence models (lstm/gru networks trained on sequence datasets).

A sequence model's card holds the :class:`~workers.data.sequences.SequenceSpec` it was trained with, so the data
to evaluate or predict is read the same way: one row per sequence (driver side,
:func:`workers.inference.sequence_frame.sequence_frame`), padded per Arrow batch on the executors
(:func:`run_batch`) exactly as the trainer pads it, each sequence's steps moved to the start of the time axis,
and the network run with the sequence lengths.

* ``last_step`` models give one prediction per sequence: the output at the sequence's last real step.
* ``per_step`` models give one prediction per step. Evaluation scores the steps that have a label (padding never
  counts); prediction returns the sequence's steps in order.

Prediction data needs no labels: a placeholder label (0 on every step) stands in for them, so a label column the
data may have is ignored. This module is the executor half (numpy and pyarrow; the network brings torch) and
what the API needs of it; the driver half is :mod:`workers.inference.sequence_frame`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from workers.data.sequences.spec import SEQUENCE_ID, SequenceSpec
from workers.numbers import shown

if TYPE_CHECKING:
    import pyarrow as pa

PLACEHOLDER_LABEL = "_sparktrain_no_label"
"""The label column prediction data gets: a sequence frame is built from features and labels."""


def spec_of(sequence: dict[str, Any], *, labelled: bool) -> SequenceSpec:
    """The dataset's sequence settings (a SequenceSpec as a dict); without labels, the placeholder label
    (class 0 / value 0 on every step)."""
    values = dict(sequence)
    if not labelled:
        values["label"] = PLACEHOLDER_LABEL
    return SequenceSpec.from_dict(values)


@dataclass(frozen=True)
class SequenceOutputs:
    """What the network gave for one Arrow batch of sequences."""

    outputs: np.ndarray
    """last_step: (n, units); per_step: (n, T, units), each sequence's steps at 0..length-1"""
    labels: np.ndarray
    """last_step: (n,) or (n, 1); per_step: (n, T), aligned with ``outputs``"""
    mask: np.ndarray | None
    """per_step: bool (n, T), True where a labelled step is; None for last_step"""
    lengths: np.ndarray
    """int64 (n,): real steps of each sequence"""
    ids: np.ndarray | None


def run_batch(net: Any, batch: pa.RecordBatch | pa.Table, spec: SequenceSpec, batch_size: int) -> SequenceOutputs:
    """Pad the batch as the trainer does, run the network with the lengths and line labels up with outputs."""
    from workers.data.sequences.pad import pad_batch
    from workers.training.torch.data import start_aligned

    arrays = pad_batch(batch, spec)
    x, y, mask = start_aligned(arrays)
    lengths = np.minimum(arrays.lengths, x.shape[1]).astype(np.int64)
    out = net.outputs(x, lengths, batch_size=batch_size)
    if spec.labels == "per_step" and mask is None:
        mask = np.arange(x.shape[1])[None, :] < lengths[:, None]
    if spec.task == "regression" and spec.labels == "last_step":
        y = y.reshape(-1, 1)
    return SequenceOutputs(out, y, mask, lengths, arrays.sequence_id)


def pad_inline(sequences: list[Any], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Online rows of a sequence model: each a list of steps, each step a list of ``width`` numbers (or a number
    when ``width`` is 1). Returns float32 ``(n, T, width)`` with each sequence at the start, and the lengths.
    Raises ValueError naming the first malformed sequence."""
    lengths = np.zeros(len(sequences), dtype=np.int64)
    parsed: list[np.ndarray] = []
    for i, seq in enumerate(sequences):
        if not isinstance(seq, list) or not seq:
            raise ValueError(f"[{i}]: a sequence is a non-empty list of steps")
        for t, step in enumerate(seq):  # numpy would take "2.5" and true as numbers
            for v in step if isinstance(step, list) else [step]:
                if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
                    raise ValueError(f"[{i}]: step {t}: {shown(v)} is not a number; steps are lists of {width} numbers")
        try:
            steps = np.asarray(seq, dtype=np.float64)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"[{i}]: steps must be lists of {width} numbers: {exc}") from exc
        if steps.ndim == 1 and width == 1:
            steps = steps.reshape(-1, 1)
        if steps.ndim != 2 or steps.shape[1] != width:
            raise ValueError(f"[{i}]: each step needs {width} numbers (got shape {list(steps.shape)})")
        if not np.isfinite(steps).all() or (np.abs(steps) > np.finfo(np.float32).max).any():
            raise ValueError(f"[{i}]: a value is NaN, infinite or beyond float32; the model cannot take it")
        parsed.append(steps)
        lengths[i] = len(steps)
    x = np.zeros((len(sequences), int(lengths.max()) if len(sequences) else 0, width), dtype=np.float32)
    for i, steps in enumerate(parsed):
        x[i, : len(steps)] = steps
    return x, lengths


def per_step_lists(values: np.ndarray, lengths: np.ndarray) -> list[Any]:
    """``(n, T, ...)`` -> one list per sequence with its real steps only."""
    return [values[i, : int(n)].tolist() for i, n in enumerate(lengths)]


__all__ = [
    "PLACEHOLDER_LABEL",
    "SEQUENCE_ID",
    "SequenceOutputs",
    "pad_inline",
    "per_step_lists",
    "run_batch",
    "spec_of",
]
