"""Evaluation and prediction of sequence models (lstm/gru networks trained on sequence datasets).

A sequence model's card holds the :class:`~workers.data.sequences.SequenceSpec` it was trained with, so the data
to evaluate or predict is read the same way: one row per sequence (:func:`sequence_frame`, driver side), padded
per Arrow batch on the executors (:func:`run_batch`) exactly as the trainer pads it, each sequence's steps moved
to the start of the time axis, and the network run with the sequence lengths.

* ``last_step`` models give one prediction per sequence: the output at the sequence's last real step.
* ``per_step`` models give one prediction per step. Evaluation scores the steps that have a label (padding never
  counts); prediction returns the sequence's steps in order.

Prediction data needs no labels: a placeholder label (0 on every step) stands in for them, so a label column the
data may have is ignored. The driver half imports pyspark inside its functions; the executor half needs numpy,
pyarrow and torch only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from workers.data.sequences.spec import SEQUENCE_ID, SequenceSpec

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from workers.context import JobContext
    from workers.data.spec import ResolvedDataset

PLACEHOLDER_LABEL = "_sparktrain_no_label"
"""The label column prediction data gets: a sequence frame is built from features and labels."""


def spec_of(sequence: dict[str, Any], *, labelled: bool) -> SequenceSpec:
    """The dataset's sequence settings (a SequenceSpec as a dict); without labels, the placeholder label
    (class 0 / value 0 on every step)."""
    values = dict(sequence)
    if not labelled:
        values["label"] = PLACEHOLDER_LABEL
    return SequenceSpec.from_dict(values)


def sequence_frame(
    ctx: JobContext, ds: ResolvedDataset, spec: SequenceSpec, *, labelled: bool
) -> tuple[DataFrame, int]:
    """One row per usable sequence (``sequence_id``, ``_x``, ``_y``, ``_len``) and how many were bad (failed or
    skipped by ``ds.bad_rows``, as in training)."""
    from workers.data.sequences import check_sequences, to_sequence_frame
    from workers.data.spec import read_dataframe

    source = read_dataframe(ctx.spark, ds)
    labels = None
    if labelled and ds.labels_path:
        labels = read_dataframe(ctx.spark, replace(ds, path=ds.labels_path))
    if not labelled:
        source = source.withColumn(PLACEHOLDER_LABEL, _placeholder(spec))
    frame = to_sequence_frame(source, spec, labels)
    good, report = check_sequences(frame, spec, bad_rows=ds.bad_rows, source=ds.path)
    if report.bad:
        ctx.warn(report.describe())
    return good, report.bad


def _placeholder(spec: SequenceSpec) -> Any:
    """0 per step (rows layout, or a scalar last_step label), or an array of zeros as long as the features
    (arrays layout with per_step labels)."""
    from pyspark.sql import functions as F

    if spec.layout == "rows" or spec.labels == "last_step":
        return F.lit(0)
    return F.transform(F.col(spec.features[0]), lambda _: F.lit(0))


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
    from workers.data.sequences import pad_batch
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
    "sequence_frame",
    "spec_of",
]
