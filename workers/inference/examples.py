"""An exported model's input example (MLflow's ``input_example.json``): the first rows of the training data that
a model can take, as JSON values. Runs on the driver; reading a couple of rows is a small Spark job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workers.data.spec import ResolvedDataset, read_dataframe
from workers.numbers import is_finite_number

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROWS = 2
MAX_VALUES = 4096
"""An example larger than this (big images, long sequences) is left out: it travels in the model card."""


def _finite(value: Any) -> bool:
    """A value a model takes: a finite number, or a boolean (a boolean column's: every row of a model with one was
    dropped, and its download had no example)."""
    if isinstance(value, list | tuple):
        return all(_finite(v) for v in value)
    return isinstance(value, bool) or is_finite_number(value)


def _size(value: Any) -> int:
    return sum(_size(v) for v in value) if isinstance(value, list | tuple) else 1


def example_rows(spark: SparkSession, ds: ResolvedDataset) -> list[Any]:
    """Up to two rows (dicts by feature column), or for sequence data one sequence (a list of steps, each a list
    of the features' values); empty when the data has none that fit or they are too large."""
    try:
        frame = _without_inference(spark, ds) or read_dataframe(spark, ds)
        if ds.sequence:
            return _sequence(frame, ds)
        rows = [r.asDict() for r in frame.select(*_as_trained(frame, ds)).limit(20).collect()]
    except Exception:  # an example is a convenience: never the reason a model is not registered
        return []
    categories = set(ds.categorical)  # any value but null: the rest must be finite numbers or booleans
    usable = [r for r in rows if _finite([v for k, v in r.items() if k not in categories]) and
              all(r[c] is not None for c in categories)]  # fmt: skip
    good = [{k: _plain(v) for k, v in row.items()} for row in usable][:ROWS]
    while good and _size([list(r.values()) for r in good]) > MAX_VALUES:
        good = good[:-1]
    return good


_SIMPLE = ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean", "string")


def _without_inference(spark: SparkSession, ds: ResolvedDataset) -> Any:
    """The features of CSV data read as text and cast to the types they were planned with; None where those are not
    known. With ``inferSchema`` Spark reads every line of the files (a 370 MB CSV: 20 s, the job stuck at "saving
    the model") before a ``limit`` reads the few rows an example needs. (JSON's inference reads every line for the
    field names too: not avoided here.)"""
    from dataclasses import replace

    from pyspark.sql import functions as F

    types = [ds.column_types.get(f, "") for f in ds.features]
    if ds.format != "csv" or ds.sequence or not all(t in _SIMPLE for t in types):
        return None
    kept = {k: v for k, v in ds.options.items() if k.lower() != "inferschema"}
    frame = read_dataframe(spark, replace(ds, options={**kept, "inferSchema": "false"}))
    if not set(ds.features) <= set(frame.columns):
        return None
    return frame.select(*[F.col(f).try_cast(t).alias(f) for f, t in zip(ds.features, types, strict=True)])


def _as_trained(frame: Any, ds: ResolvedDataset) -> list[Any]:
    """The features as the job read them: a string column the request declared numeric (CSV / JSON whose
    inference found a token that is not a number) parsed as doubles, as workers/data/clean.py does."""
    from pyspark.sql import functions as F

    types = dict(frame.dtypes)
    parsed = {f for f in ds.features if types.get(f) == "string" and ds.column_types.get(f) == "double"}
    return [F.col(f).try_cast("double").alias(f) if f in parsed else F.col(f) for f in ds.features]


def _plain(value: Any) -> Any:
    return [_plain(v) for v in value] if isinstance(value, list | tuple) else value


def _sequence(frame: Any, ds: ResolvedDataset) -> list[Any]:
    from pyspark.sql import functions as F

    assert ds.sequence is not None
    features = list(ds.features)
    if ds.sequence.get("layout") == "arrays":
        first = frame.select(*features).limit(1).collect()
        if not first:
            return []
        columns = [first[0][f] for f in features]
        steps = [list(step) for step in zip(*columns, strict=False)]
    else:
        sid, step = ds.sequence["sequence_id"], ds.sequence["step"]
        head = frame.select(sid).limit(1).collect()
        if not head:
            return []
        limit = int(ds.sequence.get("max_length") or 64)
        rows = frame.where(F.col(sid) == head[0][0]).orderBy(step).select(*features).limit(limit).collect()
        steps = [[r[f] for f in features] for r in rows]
    if not steps or not _finite(steps) or _size(steps) > MAX_VALUES:
        return []
    return [steps]
