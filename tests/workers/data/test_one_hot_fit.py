"""The categories of several categorical columns are read in one Spark pass (workers/data/one_hot.py): the same
categories and the same errors as one Spark job per column gave, in the Spark jobs of one column."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from workers.data.categories import Categories
from workers.data.one_hot import fit, text_of

COLUMNS = ["city", "tier", "flag", "zone"]
TYPES = {"city": "string", "tier": "int", "flag": "boolean", "zone": "string"}


def _frame(spark: Any) -> Any:
    rows = [(f"c{i % 7}", i % 3, i % 2 == 0, ["north", "south"][i % 2], float(i)) for i in range(400)]
    return spark.createDataFrame(rows, "city string, tier int, flag boolean, zone string, x double").repartition(4)


def _jobs(spark: Any, call: Any) -> int:
    """How many Spark jobs ``call()`` ran (those of a job group of its own)."""
    group = uuid.uuid4().hex
    sc = spark.sparkContext
    sc.setJobGroup(group, "test")
    try:
        call()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return len(sc.statusTracker().getJobIdsForGroup(group))


def test_every_column_in_one_pass_as_column_by_column(spark: Any) -> None:
    df = _frame(spark).cache()
    df.count()
    typed = Categories(inputs=("x", *COLUMNS), levels={}, types=TYPES)
    one_by_one = {c: tuple(sorted(r["level"] for r in df.select(text_of(typed, c).alias("level")).distinct()
                                  .collect())) for c in COLUMNS}  # fmt: skip
    found = fit(df, ["x", *COLUMNS], COLUMNS, TYPES)
    assert found.levels == one_by_one and found.types == TYPES
    assert found.levels["tier"] == ("0", "1", "2") and found.levels["flag"] == ("false", "true")
    # the jobs of four columns are those of one (each column was a distinct().limit() of its own: 4x the jobs)
    one = _jobs(spark, lambda: fit(df, ["x", "city"], ["city"], TYPES))
    four = _jobs(spark, lambda: fit(df, ["x", *COLUMNS], COLUMNS, TYPES))
    assert one >= 1 and four == one, (one, four)
    df.unpersist()


def test_too_many_categories_name_the_first_such_column(spark: Any) -> None:
    rows = [(f"a{i % 1001}", f"b{i}", "x") for i in range(3000)]  # a: 1,001 categories, b: 3,000
    df = spark.createDataFrame(rows, "a string, b string, c string").repartition(3)
    for columns, named in ((["c", "a", "b"], "a"), (["c", "b", "a"], "b"), (["b", "a"], "b")):
        with pytest.raises(ValueError, match=rf"^'{named}' has more than 1000 distinct values in the training data"):
            fit(df, columns, columns, {})
    empty = spark.createDataFrame([], "a string, c string")
    with pytest.raises(ValueError, match=r"^'a' has no value in the training data"):
        fit(empty, ["a"], ["a"], {})
    limit = [(f"a{i % 1000}", "x") for i in range(3000)]  # exactly 1,000: kept
    assert len(fit(spark.createDataFrame(limit, "a string, c string"), ["a"], ["a"], {}).levels["a"]) == 1000
