"""Evaluation and prediction of sequence models, driver side: the data as one row per sequence.

The same frame the trainer builds (:func:`workers.data.sequences.frame.to_sequence_frame`), bad sequences failed
or skipped as in training; prediction data gets the placeholder label of :mod:`workers.inference.sequences`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from workers.data.sequences.spec import SequenceSpec
from workers.inference.sequences import PLACEHOLDER_LABEL

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from workers.context import JobContext
    from workers.data.spec import ResolvedDataset


def sequence_frame(
    ctx: JobContext, ds: ResolvedDataset, spec: SequenceSpec, *, labelled: bool
) -> tuple[DataFrame, int]:
    """One row per usable sequence (``sequence_id``, ``_x``, ``_y``, ``_len``) and how many were bad (failed or
    skipped by ``ds.bad_rows``, as in training)."""
    from workers.data.sequences.frame import check_sequences, to_sequence_frame
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
