"""Sequence datasets: DataVec's sequence record functions (``DataVecSequenceDataSetFunction``,
``DataVecSequencePairDataSetFunction`` with its ``AlignmentMode``) for Spark DataFrames and Arrow batches.

Two halves that never mix:

* **Driver side** (:func:`to_sequence_frame`, :func:`check_sequences`): Spark DataFrame transformations that turn
  a dataset into ONE row per sequence. pyspark is imported inside the functions only.
* **Executor side** (:func:`pad_batch`): Arrow -> padded numpy arrays and masks, vectorised over the Arrow list
  offsets. stdlib, numpy and pyarrow only (no torch: the trainer wraps the arrays).

One module per part:

* :mod:`workers.data.sequences.spec`: :class:`SequenceSpec` and the names both halves share (the frame's columns,
  the reasons a sequence is bad).
* :mod:`workers.data.sequences.frame`: the driver side, and the columns of the frame between the halves. Import
  it from there: this package is imported on the executors (Python runs it before ``pad``), so it re-exports the
  names of ``spec`` and ``pad`` only.
* :mod:`workers.data.sequences.pad`: the executor side, and where padding puts the real steps.
"""

from __future__ import annotations

from workers.data.sequences.pad import SequenceArrays, pad_batch
from workers.data.sequences.spec import (
    BAD,
    BAD_REASONS,
    DUPLICATE_ID,
    DUPLICATE_STEP,
    EXAMPLES,
    LABEL_RANGE,
    LENGTH,
    LENGTH_MISMATCH,
    NO_FEATURES,
    NO_LABELS,
    NULL_FEATURE,
    NULL_ID,
    NULL_LABEL,
    NULL_STEP,
    RAGGED_FEATURES,
    SEQUENCE_ID,
    Alignment,
    BadRows,
    LabelKind,
    Layout,
    SequenceSpec,
    Task,
    X,
    Y,
)

__all__ = [
    "BAD",
    "BAD_REASONS",
    "DUPLICATE_ID",
    "DUPLICATE_STEP",
    "EXAMPLES",
    "LABEL_RANGE",
    "LENGTH",
    "LENGTH_MISMATCH",
    "NO_FEATURES",
    "NO_LABELS",
    "NULL_FEATURE",
    "NULL_ID",
    "NULL_LABEL",
    "NULL_STEP",
    "RAGGED_FEATURES",
    "SEQUENCE_ID",
    "Alignment",
    "BadRows",
    "LabelKind",
    "Layout",
    "SequenceArrays",
    "SequenceSpec",
    "Task",
    "X",
    "Y",
    "pad_batch",
]
