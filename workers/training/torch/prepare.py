"""A torch job's data on the driver: the rows the barrier stage trains on.

Reads the training (and validation) data, drops or fails bad rows (:mod:`workers.data.clean`), turns string
class labels into their indices, marks each row's split (a ``_split`` column: 0 training, 1 validation, the
validation set given or a seeded fraction held out), fits the normalizer on the training rows, and spreads the
rows into ``num_workers`` equal partitions, each row with a stable row id (``_row``; the tasks sort by it).
Sequence datasets become one row per sequence first (:mod:`workers.data.sequences.frame`).
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from workers.context import JobContext, JobFailure
from workers.data.arrow_read import SCALE, file_rows, local_files, shares, too_few_rows
from workers.data.clean import clean, clean_holdout, reason_words
from workers.data.normalize import Normalizer
from workers.data.normalize import fit as fit_normalizer
from workers.data.one_hot import expand
from workers.data.spec import ResolvedDataset, read_dataframe
from workers.training.torch.config import TorchPlan

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

SPLIT, ROW = "_split", "_row"
"""The columns :func:`prepare` adds: the row's split (0 training, 1 validation) and its stable order."""


def prepare(
    ctx: JobContext, plan: TorchPlan
) -> tuple[DataFrame, dict[str, int] | None, Normalizer | None, dict[str, Any] | None]:
    """The stage's rows, their counts (``train``, ``validation``, ``bad_rows``; None when the tasks count them), the
    fitted normalizer, and the barrier tasks' own read of the files (:mod:`workers.data.arrow_read`) when local
    parquet has no bad row: the stage's rows are then one placeholder per worker, and no shuffle moves the data."""
    from pyspark.sql import functions as F

    if plan.train.sequence is not None:
        frame, counts, _none = _prepare_sequences(ctx, plan)
        return frame, counts, None, None
    length = math.prod(plan.input_shape) if plan.array_column else None
    source = _arrow_source(plan)
    if source is not None and plan.train.bad_rows == "fail" and plan.train.normalize is None:
        return _checked_by_tasks(ctx, plan, source, length)
    train_raw = _index_labels(read_dataframe(ctx.spark, plan.train, malformed=True), plan)
    fraction = plan.train.validation_fraction or plan.validation_fraction
    if plan.validation is not None:
        train, rows, dropped = clean(ctx, train_raw, plan.train, array_length=length)
        val_raw = _index_labels(read_dataframe(ctx.spark, plan.validation, malformed=True), plan)
        val, val_rows, val_dropped = clean(ctx, val_raw, plan.validation, array_length=length)
        frame = train.withColumn(SPLIT, F.lit(0)).unionByName(val.withColumn(SPLIT, F.lit(1)), allowMissingColumns=True)
    else:
        split = None
        if source is not None:
            split = split_column(source["files"], source["rows"], plan.train.split_seed, fraction)
        # the split is counted in the bad-row pass: no separate count job
        frame, rows, val_rows, dropped = clean_holdout(
            ctx, train_raw, plan.train, fraction, SPLIT, array_length=length, split=split
        )
        val_dropped = 0
        held = f"{val_rows} of {rows + val_rows} rows held out ({fraction:.0%}, seed {plan.train.split_seed})"
        ctx.log(f"no validation set given: {held}")
    _check_rows(plan, rows)
    categories = plan.categories
    if categories is not None:  # the one-hot columns the network takes, in place of the categorical ones
        frame = expand(categories, frame).drop(*categories.levels)
    normalizer = None
    if plan.train.normalize is not None:
        normalizer = fit_normalizer(
            frame.where(F.col(SPLIT) == 0), plan.features, plan.train.normalize, array_column=plan.array_column
        )
        ctx.log(f"{plan.train.normalize} normalizer fitted on {normalizer.count} training rows")
    counts = {"train": rows, "validation": val_rows, "bad_rows": dropped + val_dropped}
    if source is not None and dropped == 0 and rows + val_rows == sum(source["rows"]):
        read = {
            **source,
            "shares": shares(rows + val_rows, plan.num_workers),
            "seed": plan.train.split_seed,
            "fraction": fraction,
            "class_labels": list(plan.class_labels) if plan.class_labels is not None else None,
        }
        ctx.log("no bad row: each worker reads its share of the parquet files itself (no shuffle)")
        return ctx.spark.range(0, plan.num_workers, 1, plan.num_workers), counts, normalizer, read
    return _spread(frame, plan), counts, normalizer, None


def _checked_by_tasks(
    ctx: JobContext, plan: TorchPlan, source: dict[str, Any], length: int | None
) -> tuple[DataFrame, None, None, dict[str, Any]]:
    """No Spark job before the stage: each task reads its share of the files and checks its rows, and the tasks
    share the counts (:func:`workers.data.arrow_read.check_share`). Only where nothing needs the whole frame first:
    bad rows fail the job (none is dropped, so the shares are the files' rows), no normalizer is fitted."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ds = plan.train
    types = pq.read_schema(source["files"][0])
    kinds = []
    for column in source["columns"]:
        t = types.field(column).type
        kind = "array" if pa.types.is_list(t) or pa.types.is_large_list(t) else "int"
        kinds.append([column, "float" if pa.types.is_floating(t) else kind])
    classification = ds.task == "classification"
    stopping = plan.early_stopping["metric"] if plan.early_stopping else None
    check = {
        "columns": kinds,
        "array_length": length,
        "weight": ds.weight,
        "label": ds.label if classification else None,
        "num_classes": ds.num_classes if classification else None,
        "reasons": reason_words(ds, length),
        "path": ds.path,
        "workers": plan.num_workers,
        "batch_size": plan.batch_size,
        "needs_validation": f"early stopping on {stopping} needs validation rows, and there are none"
        if stopping
        else None,
    }
    fraction = ds.validation_fraction or plan.validation_fraction
    read = {
        **source,
        "shares": shares(sum(source["rows"]), plan.num_workers),
        "seed": ds.split_seed,
        "fraction": fraction,
        "class_labels": list(plan.class_labels) if plan.class_labels is not None else None,
        "check": check,
    }
    ctx.log(
        f"no Spark job before the stage: each worker reads its share of the parquet files and checks its rows "
        f"(bad_rows fail); {fraction:.0%} held out for validation (seed {ds.split_seed})"
    )
    return ctx.spark.range(0, plan.num_workers, 1, plan.num_workers), None, None, read


def _arrow_source(plan: TorchPlan) -> dict[str, Any] | None:
    """The files and columns the barrier tasks can read themselves: local parquet without reader options, as
    training data with a held-out fraction (a separate validation set goes through Spark)."""
    ds = plan.train
    if ds.format != "parquet" or ds.options or plan.validation is not None or plan.categorical:
        return None  # (the tasks' own read does not one-hot encode)
    files = local_files(ds.path)
    if files is None:
        return None
    try:
        rows = file_rows(files)
    except Exception:  # a footer pyarrow cannot read: Spark reads the data (and says what is wrong)
        return None
    columns = list(dict.fromkeys([*ds.features, *ds.label_columns, *([ds.weight] if ds.weight else [])]))
    return {"files": files, "rows": rows, "columns": columns, "label": ds.label}


def split_column(files: list[str], rows: list[int], seed: int, fraction: float) -> Column:
    """The Spark expression of :func:`workers.data.arrow_read.held_out` on a parquet row (1 held out, 0 training):
    the row's global index from its file's offset and its ``_metadata.row_index``."""
    from pyspark.sql import functions as F

    offsets = F.create_map(
        *[x for name, start in zip(files, itertools.accumulate([0, *rows[:-1]]), strict=True)
          for x in (F.lit(os.path.basename(name)), F.lit(int(start)).cast("long"))]
    )  # fmt: skip
    index = F.element_at(offsets, F.col("_metadata.file_name")) + F.col("_metadata.row_index")
    hashed = F.hash(F.lit(seed).cast("long"), index.cast("long"))
    return (F.pmod(hashed, F.lit(SCALE)) < F.lit(round(fraction * SCALE))).cast("int")


def _spread(frame: DataFrame, plan: TorchPlan) -> DataFrame:
    """``num_workers`` partitions of equal size (to one row per input partition), each row with a stable row id.

    One shuffle and no sort: each input partition deals its rows to the workers in turn, as a round-robin
    ``repartition`` does, but on a key whose hash lands on the wanted worker (:func:`worker_keys`), so Spark's
    hash partitioning places each row exactly. A round-robin repartition would sort every input partition first
    (to stay deterministic on a retry), and the barrier tasks sort their rows by ``_row`` themselves
    (:func:`workers.training.torch.data.to_splits`), so neither sort is needed here."""
    from pyspark.sql import functions as F

    n = plan.num_workers
    keys = F.array(*[F.lit(k).cast("long") for k in worker_keys(n)])  # hashed as longs
    turn = F.pmod(F.col(ROW) + F.spark_partition_id(), F.lit(n)).cast("int")
    dealt = frame.withColumn(ROW, F.monotonically_increasing_id()).withColumn(_WORKER, F.element_at(keys, turn + 1))
    return dealt.repartition(n, _WORKER).drop(_WORKER)


_WORKER = "_worker"


def worker_keys(n: int) -> list[int]:
    """For each worker 0..n-1, a long whose Spark hash partitioning over ``n`` partitions is that worker:
    ``pmod(hash(key), n)``, Spark's Murmur3 hash of a long with seed 42 (:func:`spark_hash_long`), here on the driver
    without a job."""
    found: dict[int, int] = {}
    key = 0
    while len(found) < n:
        found.setdefault(spark_hash_long(key) % n, key)  # Python's % of a signed int is Spark's pmod
        key += 1
    return [found[w] for w in range(n)]


def spark_hash_long(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of one long (``Murmur3_x86_32.hashLong``), as a signed 32-bit int."""
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    def mix(h1: int, k1: int) -> int:
        k1 = rotl((k1 * 0xCC9E2D51) & mask, 15) * 0x1B873593 & mask
        return (rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & mask

    value &= 0xFFFFFFFFFFFFFFFF
    h1 = mix(mix(seed & mask, value & mask), value >> 32)
    h1 ^= 8
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & mask
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & mask
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


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
    short = too_few_rows(rows, plan.num_workers, plan.batch_size)
    if short is not None:
        raise JobFailure("EMPTY_PARTITION", short)
