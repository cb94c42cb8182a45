"""A batch-prediction job (``POST /predict`` with a dataset): keyed predictions written as parquet.

Partitions are unordered, so every output row carries the dataset's ``key`` column (DL4J's
``feedForwardWithKey``). torch models run in ``mapInArrow`` with the model loaded once per Python worker;
Spark ML models use their own ``transform``.

The output is written to a private directory next to the output path (``.<name>.partial-<job>-<attempt>``, hidden
from readers of the parent) and renamed into place once complete, so a retried job never leaves a mix of two
attempts' files, and a reader never sees half of one. The directory holds a marker with the job's id
(``_SPARKTRAIN_JOB``): an attempt that finds the output already written by an earlier attempt of the same job (it
died after the rename) replaces it; any other directory there fails the job, whenever it appeared: the rename never
replaces what it finds (``renameat2(RENAME_NOREPLACE)``), and an earlier attempt's output is moved aside and looked
at again before it is removed, so another job's output that took its place in between is put back, not deleted.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from workers import storage
from workers.context import JobContext, JobFailure, JobOutcome
from workers.data.clean import clean
from workers.data.one_hot import expand
from workers.data.spec import read_dataframe
from workers.inference.remote import (
    model_predictions,
    output_schema,
    sequence_output_schema,
    sequence_predictions,
)
from workers.inference.spec import OUTPUT_MARKER, ModelRef, PredictionPlan
from workers.numbers import have, n_rows, were
from workers.spark_progress import StageProgress

MARKER = OUTPUT_MARKER
log = logging.getLogger(__name__)


def predict(ctx: JobContext, plan: PredictionPlan) -> JobOutcome:
    from pyspark.sql import functions as F

    model, ds = plan.model, plan.dataset
    check_model_files(model)
    ctx.progress(0.05, "predicting")
    if ds.sequence is not None:
        return _predict_sequences(ctx, plan)
    source = read_dataframe(ctx.spark, ds)
    keyless = 0
    with StageProgress(ctx, low=0.05, high=CHECKED, label="checking the rows"):  # a pass over every row
        if ds.bad_rows == "skip":  # a row without a key is a bad row: left out, counted
            keyless = source.where(F.col(plan.key).isNull()).count()
            source = source.where(F.col(plan.key).isNotNull())
        elif source.where(F.col(plan.key).isNull()).limit(1).count():
            raise JobFailure("BAD_ROWS", f"the key column {plan.key!r} of {ds.path} has nulls: every row needs a key; "
                             'fill them in, or set dataset.bad_rows to "skip" to leave those rows out')  # fmt: skip
        categories = model.categories
        checked = model.reading(ds, label=None, extra_labels=(), weight=None)
        width = model.width if model.card.get("array_column") else None
        rows, usable, dropped = clean(ctx, source, checked, array_length=width, extra_columns=(plan.key,))
    if keyless and not usable:  # (every row is bad whatever the policy; clean saw none of these)
        more = f" and {dropped} more are bad rows" if dropped else ""
        raise JobFailure("BAD_ROWS", f"every row of {ds.path} is bad: {keyless} {have(keyless)} no key "
                         f"({plan.key} is null){more}")  # fmt: skip
    if keyless:
        ctx.warn(f"{n_rows(keyless)} of {ds.path} {have(keyless)} no key ({plan.key} is null) and "
                 f"{were(keyless)} left out (bad_rows=skip)")  # fmt: skip
        dropped += keyless
    if categories is not None:  # the one-hot columns the model takes, from the cleaned rows
        rows = expand(categories, rows)
    if model.framework in ("torch", "xgboost"):
        key_type = dict(rows.dtypes)[plan.key]
        schema = output_schema(model, plan.key, key_type)
        out = rows.mapInArrow(model_predictions(model, plan.key, plan.batch_size), schema)
    elif model.framework == "spark_ml":
        out = _spark_ml(model, rows, plan.key)
    else:
        raise JobFailure("UNSUPPORTED", f"batch prediction with {model.framework} models is not available yet")
    return _write(ctx, plan, out, dropped)


CHECKED, WRITTEN = 0.2, 0.9
"""The bar after the pass that counts the bad rows, and after the predictions are written (the rest: their footers
read, the keys checked, the output published)."""

MODEL_FILES = {"torch": ("weights.safetensors",), "xgboost": ("model.json", "card.json"),
               "spark_ml": ("metadata", "stages")}  # fmt: skip
"""What each family's loader reads from a model directory (torch also its card: ``spec.json``, or a checkpoint's
``meta.json``)."""


def missing_model_files(uri: str, framework: str) -> tuple[list[str], str]:
    """The files of :data:`MODEL_FILES` a model directory lacks, and where, said (``<uri> is gone``, ``<uri> has no
    ...``): for a prediction's model and a fine-tune's ``init_from`` alike."""
    names = set(storage.list_dir(uri))
    missing = [n for n in MODEL_FILES.get(framework, ()) if n not in names]
    if framework == "torch" and not names & {"spec.json", "meta.json"}:
        missing.insert(0, "spec.json")
    return missing, (f"{uri} is gone" if not names else f"{uri} has no {', '.join(missing)}")


def check_model_files(model: ModelRef) -> None:
    """The model's files, looked for on the driver before Spark runs: a version whose artifact directory was removed
    failed on the executors, a SPARK_ERROR with a traceback of ``load_model``. A store that cannot be reached is a
    :class:`~workers.storage.StorageError` (retried), not this."""
    missing, where = missing_model_files(model.uri, model.framework)
    if missing:
        which = f"checkpoint {model.checkpoint_id}" if model.checkpoint_id else f"{model.name} version {model.version}"
        raise JobFailure(
            "MODEL_FILES_MISSING", f"the files of {which} are missing: {where} (removed or moved since it was "
            f"registered; it needs {', '.join(missing)}): predict with another version, or train it again"
        )  # fmt: skip


def _write(ctx: JobContext, plan: PredictionPlan, out: Any, dropped: int) -> JobOutcome:
    final = Path(plan.output_path)
    partial = final.with_name(f".{final.name}.partial-{ctx.job_id}-{ctx.attempt}")
    for stale in final.parent.glob(f".{final.name}.partial-{ctx.job_id}-*"):  # earlier attempts of this job
        shutil.rmtree(stale, ignore_errors=True)
    with StageProgress(ctx, low=CHECKED, high=WRITTEN, label="predicting"):  # the bar moves with the tasks
        out.write.mode("errorifexists").parquet(str(partial))
    storage.attempt("writing", str(partial), lambda: (partial / MARKER).write_text(ctx.job_id))
    if final.exists() and _writer(final) != ctx.job_id:  # early, before the footers are read
        _foreign(final, partial)
    parts = _part_files(partial)
    written = _rows_written(parts)
    ctx.check_cancelled()  # a cancel during the write's grace ends the job here, before another Spark job
    repeated = _repeated_keys(ctx.spark, parts, plan.key, written)
    ctx.check_cancelled()  # (the count's Spark job, cancelled, is advice not counted: never published as done)
    if repeated:
        ctx.warn(f"the key {plan.key!r} is not unique: {repeated} of the {written} output rows repeat the key of an "
                 "earlier row, so the predictions cannot be joined back to their rows by it; key a batch by a "
                 "column that tells the rows apart (an id)")  # fmt: skip
    ctx.progress(1.0, "done")
    # the last step: a Spark job after it (the count it used to run) could be cancelled or fail, and the job would
    # end CANCELLED or FAILED with its complete output in place, blocking a new prediction to the same path
    storage.attempt("publishing", str(final), lambda: _publish(partial, final, ctx.job_id))
    result: dict[str, Any] = {"output_uri": plan.output_path, "rows": written, "bad_rows": dropped,
                              "repeated_keys": repeated}  # fmt: skip
    return JobOutcome(result=result)


def _writer(directory: Path) -> str | None:
    """The job id a directory's marker names (None: no marker, not a directory this service wrote)."""
    try:
        return (directory / MARKER).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _foreign(final: Path, partial: Path) -> None:
    shutil.rmtree(partial, ignore_errors=True)
    raise JobFailure("OUTPUT_EXISTS", f"{final} appeared while the job ran, written by someone else; nothing was "
                     "replaced: predict again to a new output_uri")  # fmt: skip


def _publish(partial: Path, final: Path, job_id: str) -> None:
    """Rename the complete ``partial`` to ``final``, which must not exist or must be this job's own output (an earlier
    attempt died after its rename). Anything else there, even one that appeared a moment ago, stays untouched."""
    if _rename_new(partial, final):
        return
    if _writer(final) != job_id:
        _foreign(final, partial)
    aside = final.with_name(f".{final.name}.old-{uuid.uuid4().hex[:8]}")  # hidden from Spark's readers
    os.rename(final, aside)
    if _writer(aside) != job_id:  # replaced between the look and the rename: put it back, keep it whole
        _rename_new(aside, final)
        _foreign(final, partial)
    if not _rename_new(partial, final):
        shutil.rmtree(aside, ignore_errors=True)  # this job's own earlier output
        _foreign(final, partial)
    shutil.rmtree(aside, ignore_errors=True)


def _rename_new(source: Path, target: Path) -> bool:
    """Rename ``source`` to ``target`` unless something is there (False): Linux's ``renameat2`` with
    ``RENAME_NOREPLACE``; elsewhere ``rename``, which replaces no directory but an empty one."""
    call = _RENAMEAT2
    if call is not None:
        if call(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE) == 0:
            return True
        code = ctypes.get_errno()
        if code == errno.EEXIST:
            return False
        if code not in (errno.EINVAL, errno.ENOSYS):  # a file system without the flag: rename below
            raise OSError(code, os.strerror(code), str(source), None, str(target))
    try:
        os.rename(source, target)
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            return False
        raise
    return True


def _renameat2() -> Any:
    """glibc's ``renameat2`` (2.28 and later), or None."""
    try:
        call = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    except (OSError, TypeError):
        return None
    if call is not None:
        call.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        call.restype = ctypes.c_int
    return call


_RENAMEAT2, _AT_FDCWD, _RENAME_NOREPLACE = _renameat2(), -100, 1


def _part_files(directory: Path) -> list[str]:
    """The parquet files Spark wrote under ``directory`` (not its hidden or ``_`` files)."""
    return sorted(str(f) for f in directory.rglob("*.parquet") if not f.name.startswith((".", "_")))


def _rows_written(files: list[str]) -> int:
    """The rows of the parquet files Spark wrote, from their footers: Spark itself reads nothing under a directory
    whose name starts with '.', as the private one does, and a count after the rename would be a Spark job too."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def _repeated_keys(spark: Any, files: list[str], key: str, rows: int) -> int | None:
    """How many rows repeat a key an earlier row has (0: the key is unique), or None when it was not checked: a
    nested key (a struct, an array, a map; never checked), or one Spark cannot group (advice never fails a job whose
    output is written). Spark counts them over the written files, whatever their number, and the driver gets one row
    back: reading the keys there (pyarrow) took 318 MB more of its memory for 3 million int64 keys."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType

    if rows == 0:  # Spark still writes a part file, whose key column reads back typed null
        return 0
    keys = spark.read.parquet(*files)
    column = keys.schema[key]
    if isinstance(column.dataType, (StructType, ArrayType, MapType)):
        log.warning("the keys of %s were not checked for repeats: a %s key", files, column.dataType.simpleString())
        return None
    try:
        quoted = "`" + key.replace("`", "``") + "`"  # a name with a dot is no nested field
        grouped = keys.groupBy(F.col(quoted).alias("key")).agg(F.count(F.lit(1)).alias("rows"))
        repeats = grouped.where(F.col("rows") > 1).agg(F.sum(F.col("rows") - 1).alias("repeats")).first()
    except Exception as exc:  # a key of a type Spark cannot group, a count that failed: the output stands
        log.warning("the keys of %s were not checked for repeats: %s: %s", files, type(exc).__name__, exc)
        return None
    return int(repeats["repeats"] or 0) if repeats is not None else 0


def _predict_sequences(ctx: JobContext, plan: PredictionPlan) -> JobOutcome:
    """One output row per sequence, keyed by the sequence id (the plan's key); bad sequences fail the job or are
    skipped and counted, as in training."""
    from workers.data.sequences import SEQUENCE_ID
    from workers.inference.sequence_frame import sequence_frame
    from workers.inference.sequences import spec_of

    ds = plan.dataset
    assert ds.sequence is not None
    frame, dropped = sequence_frame(ctx, ds, spec_of(ds.sequence, labelled=False), labelled=False)
    key_type = dict(frame.dtypes)[SEQUENCE_ID]
    schema = sequence_output_schema(plan.model, ds.sequence, plan.key, key_type)
    out = frame.mapInArrow(sequence_predictions(plan.model, ds.sequence, plan.key, plan.batch_size), schema)
    return _write(ctx, plan, out, dropped)


def _spark_ml(model: Any, rows: Any, key: str) -> Any:
    from pyspark.ml import PipelineModel
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    predicted = PipelineModel.load(str(storage.fetch_dir(model.uri))).transform(rows)
    if model.task != "classification":
        return predicted.select(key, F.col("prediction").cast("double").alias("prediction"))
    index = F.col("prediction").cast("long")
    if model.class_labels:
        names = F.array(*[F.lit(str(v)) for v in model.class_labels])
        label = F.element_at(names, (index + 1).cast("int"))
    else:
        label = index
    return predicted.select(
        key,
        index.alias("prediction"),
        label.alias("label"),
        vector_to_array(F.col("probability")).alias("probabilities"),
    )
