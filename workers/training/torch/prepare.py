"""A torch job's data on the driver: the rows the barrier stage trains on.

Reads the training (and validation) data, drops or fails bad rows (:mod:`workers.data.clean`), turns string
class labels into their indices, marks each row's split (a ``_split`` column: 0 training, 1 validation, the
validation set given or a seeded fraction held out), fits the normalizer on the training rows, and spreads the
rows into ``num_workers`` equal partitions, each sorted by a stable row id (``_row``). Sequence datasets become
one row per sequence first (:mod:`workers.data.sequences.frame`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from workers.context import JobContext, JobFailure
from workers.data.clean import clean, clean_holdout
from workers.data.normalize import Normalizer
from workers.data.normalize import fit as fit_normalizer
from workers.data.spec import ResolvedDataset, read_dataframe
from workers.training.torch.config import TorchPlan

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

SPLIT, ROW = "_split", "_row"
"""The columns :func:`prepare` adds: the row's split (0 training, 1 validation) and its stable order."""


def prepare(ctx: JobContext, plan: TorchPlan) -> tuple[DataFrame, dict[str, int], Normalizer | None]:
    """The stage's rows, their counts (``train``, ``validation``, ``bad_rows``) and the fitted normalizer."""
    from pyspark.sql import functions as F

    if plan.train.sequence is not None:
        return _prepare_sequences(ctx, plan)
    length = math.prod(plan.input_shape) if plan.array_column else None
    train_raw = _index_labels(read_dataframe(ctx.spark, plan.train, malformed=True), plan)
    if plan.validation is not None:
        train, rows, dropped = clean(ctx, train_raw, plan.train, array_length=length)
        val_raw = _index_labels(read_dataframe(ctx.spark, plan.validation, malformed=True), plan)
        val, val_rows, val_dropped = clean(ctx, val_raw, plan.validation, array_length=length)
        frame = train.withColumn(SPLIT, F.lit(0)).unionByName(val.withColumn(SPLIT, F.lit(1)), allowMissingColumns=True)
    else:
        fraction = plan.train.validation_fraction or plan.validation_fraction
        # the split is counted in the bad-row pass: no separate count job
        frame, rows, val_rows, dropped = clean_holdout(ctx, train_raw, plan.train, fraction, SPLIT, array_length=length)
        val_dropped = 0
        held = f"{val_rows} of {rows + val_rows} rows held out ({fraction:.0%}, seed {plan.train.split_seed})"
        ctx.log(f"no validation set given: {held}")
    _check_rows(plan, rows)
    normalizer = None
    if plan.train.normalize is not None:
        normalizer = fit_normalizer(
            frame.where(F.col(SPLIT) == 0), plan.train.features, plan.train.normalize, array_column=plan.array_column
        )
        ctx.log(f"{plan.train.normalize} normalizer fitted on {normalizer.count} training rows")
    return _spread(frame, plan), {"train": rows, "validation": val_rows, "bad_rows": dropped + val_dropped}, normalizer


def _spread(frame: DataFrame, plan: TorchPlan) -> DataFrame:
    """``num_workers`` partitions, each sorted by a stable row id."""
    from pyspark.sql import functions as F

    return (
        frame.withColumn(ROW, F.monotonically_increasing_id()).repartition(plan.num_workers).sortWithinPartitions(ROW)
    )


def _index_labels(df: DataFrame, plan: TorchPlan) -> DataFrame:
    """String class labels -> their index in ``plan.class_labels``; an unknown label becomes -1, a bad row."""
    from pyspark.sql import functions as F

    if plan.class_labels is None or plan.train.label is None:
        return df
    labels = F.array(*[F.lit(v) for v in plan.class_labels])
    return df.withColumn(plan.train.label, (F.array_position(labels, F.col(plan.train.label)) - 1).cast("int"))


def _sequences(ctx: JobContext, ds: ResolvedDataset, num_classes: int | None) -> tuple[DataFrame, int, int]:
    """Sequence rows -> one row per sequence (``_x``, ``_y``, ``_len``), bad sequences failed or skipped."""
    from workers.data.sequences.frame import check_sequences, to_sequence_frame
    from workers.data.sequences.spec import SequenceSpec

    assert ds.sequence is not None
    spec = SequenceSpec.from_dict({**ds.sequence, "num_classes": num_classes})
    labels = read_dataframe(ctx.spark, replace(ds, path=ds.labels_path)) if ds.labels_path else None
    frame = to_sequence_frame(read_dataframe(ctx.spark, ds), spec, labels)
    good, report = check_sequences(frame, spec, bad_rows=ds.bad_rows, source=ds.path)
    if report.bad:
        ctx.warn(report.describe())
    return good, report.usable, report.bad


def _prepare_sequences(ctx: JobContext, plan: TorchPlan) -> tuple[DataFrame, dict[str, int], None]:
    from pyspark.sql import functions as F

    num_classes = plan.train.num_classes
    train, rows, dropped = _sequences(ctx, plan.train, num_classes)
    if plan.validation is not None:
        val, val_rows, val_dropped = _sequences(ctx, plan.validation, num_classes)
        frame = train.withColumn(SPLIT, F.lit(0)).unionByName(val.withColumn(SPLIT, F.lit(1)))
    else:
        fraction = plan.train.validation_fraction or plan.validation_fraction
        frame = train.withColumn(SPLIT, (F.rand(plan.train.split_seed) < fraction).cast("int"))
        counts = {int(r[SPLIT]): int(r["count"]) for r in frame.groupBy(SPLIT).count().collect()}
        rows, val_rows, val_dropped = counts.get(0, 0), counts.get(1, 0), 0
    _check_rows(plan, rows)
    return _spread(frame, plan), {"train": rows, "validation": val_rows, "bad_rows": dropped + val_dropped}, None


def _check_rows(plan: TorchPlan, rows: int) -> None:
    needed = plan.num_workers * plan.batch_size
    if rows < needed:
        raise JobFailure(
            "EMPTY_PARTITION",
            f"{rows} training rows cannot give {plan.num_workers} workers a batch of {plan.batch_size} each "
            f"(needs {needed}); use fewer workers, a smaller batch_size_per_worker or more data",
        )
