"""A model's input example reads a few rows of CSV without Spark's schema inference over every line of the files: on
a 3-million-row CSV (370 MB) that pass held a finished xgboost job at "saving the model" for 22 s. The rows it gives
are the ones the inferred read gave, with the planned types."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from workers.data.spec import ResolvedDataset
from workers.inference.examples import example_rows

ROWS = 3000
GROUP = "input-example-test"


@pytest.fixture
def small_splits(spark: Any) -> Iterator[None]:
    """Many file splits per CSV, so that a pass over every line shows as many tasks."""
    key = "spark.sql.files.maxPartitionBytes"
    before = spark.conf.get(key)
    spark.conf.set(key, "4096")
    try:
        yield
    finally:
        spark.conf.set(key, before)


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "rows.csv"
    lines = ["n,x,flag,city,y"] + [
        f"{i},{i * 0.5},{'true' if i % 2 else 'false'},c{i % 3},{i % 2}" for i in range(ROWS)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _dataset(path: Path) -> ResolvedDataset:
    return ResolvedDataset(
        path=str(path), format="csv", features=("n", "x", "flag", "city"), label="y", task="classification",
        options={"header": "true", "inferSchema": "true"}, categorical=("city",),
        column_types={"n": "int", "x": "double", "flag": "boolean", "city": "string"},
    )  # fmt: skip


def _tasks(spark: Any) -> int:
    tracker = spark.sparkContext.statusTracker()
    total = 0
    for job in tracker.getJobIdsForGroup(GROUP):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info else ():
            found = tracker.getStageInfo(stage)
            total += found.numTasks if found else 0
    return total


def test_the_example_reads_a_few_rows_not_every_line(spark: Any, tmp_path: Path, small_splits: None) -> None:
    path = _csv(tmp_path)
    splits = spark.read.text(str(path)).rdd.getNumPartitions()
    assert splits > 10  # a pass over the file is that many tasks
    spark.sparkContext.setJobGroup(GROUP, "input example")
    try:
        rows = example_rows(spark, _dataset(path))
    finally:
        spark.sparkContext.setJobGroup("", "")
    assert rows == [{"n": 0, "x": 0.0, "flag": False, "city": "c0"}, {"n": 1, "x": 0.5, "flag": True, "city": "c1"}]
    assert _tasks(spark) < splits  # an inference pass alone would run ``splits`` tasks


def test_without_planned_types_the_data_is_read_as_inferred(spark: Any, tmp_path: Path) -> None:
    ds = _dataset(_csv(tmp_path))
    plain = ResolvedDataset(**{**ds.__dict__, "column_types": {}})
    assert example_rows(spark, plain) == example_rows(spark, ds)
