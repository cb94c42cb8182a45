"""A batch prediction's keys are checked for repeats by Spark, on a real SparkSession: the driver holds a count, not
the keys (workers/inference/batch.py ``_repeated_keys``).

The check read every key of the output onto the driver with pyarrow: 3 million int64 keys took 318 MB more of the
driver's memory (more for string keys), which is why an output over 5 million rows was not checked at all.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa

from workers.context import JobCancelled
from workers.inference.batch import _write


class Ctx:
    def __init__(self, spark: Any) -> None:
        self.job_id, self.attempt, self.spark = "a" * 32, 1, spark
        self.warnings: list[str] = []

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def progress(self, fraction: float, message: str | None = None) -> None:
        pass

    cancelled = False

    def check_cancelled(self) -> None:
        if self.cancelled:
            raise JobCancelled(self.job_id)


def _keyed(spark: Any, distinct: int, repeats: int, partitions: int = 2) -> Any:
    """``distinct`` keys, then ``repeats`` rows that repeat the first keys (each once)."""
    return spark.range(0, distinct + repeats, numPartitions=partitions).selectExpr(
        f"IF(id >= {distinct}, id - {distinct}, id) AS key", "CAST(id AS DOUBLE) AS prediction"
    )


class _ArrowPeak(threading.Thread):
    """The most memory pyarrow held on the driver (its default pool) while the write ran, sampled every 2 ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.base, self.peak, self.done = pa.total_allocated_bytes(), 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.002):
            self.peak = max(self.peak, pa.total_allocated_bytes() - self.base)


def test_many_distinct_keys_and_a_few_repeats_leave_the_keys_off_the_driver(spark: Any, tmp_path: Path) -> None:
    distinct, repeats = 300_000, 7
    ctx, final = Ctx(spark), tmp_path / "out"
    sampler = _ArrowPeak()
    sampler.start()
    try:
        outcome = _write(ctx, SimpleNamespace(output_path=str(final), key="key"), _keyed(spark, distinct, repeats), 0)  # type: ignore[arg-type]
    finally:
        sampler.done.set()
        sampler.join()
    assert outcome.result is not None
    assert (outcome.result["rows"], outcome.result["repeated_keys"]) == (distinct + repeats, repeats)
    assert len(ctx.warnings) == 1 and f"{repeats} of the {distinct + repeats} output rows repeat" in ctx.warnings[0]
    # the keys are 2.4 MB as int64 (the old check had pyarrow hold 78 MB): the driver now holds none of them
    assert sampler.peak < 1_000_000, f"the driver held {sampler.peak} bytes of keys"


def test_a_key_named_with_a_dot_or_count_is_checked(spark: Any, tmp_path: Path) -> None:
    for i, name in enumerate(["trip.id", "count", "rows"]):
        frame = _keyed(spark, 10, 2).withColumnRenamed("key", name)
        outcome = _write(Ctx(spark), SimpleNamespace(output_path=str(tmp_path / f"out{i}"), key=name), frame, 0)  # type: ignore[arg-type]
        assert outcome.result is not None and outcome.result["repeated_keys"] == 2, name


def test_string_keys_are_counted(spark: Any, tmp_path: Path) -> None:
    frame = _keyed(spark, 1000, 4).selectExpr("concat('trip-', CAST(key AS STRING)) AS key", "prediction")
    outcome = _write(Ctx(spark), SimpleNamespace(output_path=str(tmp_path / "out"), key="key"), frame, 0)  # type: ignore[arg-type]
    assert outcome.result is not None and (outcome.result["rows"], outcome.result["repeated_keys"]) == (1004, 4)


def test_a_job_cancelled_as_its_output_is_written_publishes_nothing(spark: Any, tmp_path: Path) -> None:
    """Review: the key count is a Spark job after the write; a cancel that came during the write's grace (its Spark
    job not killed) started it anyway and published the output of a cancelled job."""
    ctx, final = Ctx(spark), tmp_path / "out"
    ctx.cancelled = True
    try:
        _write(ctx, SimpleNamespace(output_path=str(final), key="key"), _keyed(spark, 100, 1), 0)  # type: ignore[arg-type]
    except JobCancelled:
        pass
    else:
        raise AssertionError("the cancelled job's prediction went on")
    assert not final.exists()
