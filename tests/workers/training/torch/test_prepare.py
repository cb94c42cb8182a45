"""How a torch job's rows are dealt to its workers: one shuffle on a key whose Spark hash partition is the worker,
so every worker gets an equal share (to one row per input partition) with no sort."""

from __future__ import annotations

from typing import Any

from workers.training.torch.prepare import spark_hash_long, worker_keys


def test_worker_keys_follow_sparks_hash_partitioning(spark: Any) -> None:
    from pyspark.sql import functions as F

    values = [0, 1, 5, -1, 2**40 + 7, -(2**62), 123456789]
    hashed = spark.createDataFrame([(v,) for v in values], "k long").select(F.hash("k").alias("h")).collect()
    assert [r["h"] for r in hashed] == [spark_hash_long(v) for v in values]
    for n in (2, 3, 7):
        keys = worker_keys(n)
        frame = spark.createDataFrame([(k,) for k in keys], "k long").repartition(n, "k")
        placed = frame.select(F.spark_partition_id().alias("p"), "k").collect()
        assert sorted((r["p"], r["k"]) for r in placed) == [(w, keys[w]) for w in range(n)]


def test_rows_are_dealt_equally(spark: Any) -> None:
    from dataclasses import dataclass

    from workers.training.torch.prepare import ROW, _spread

    @dataclass
    class Plan:
        num_workers: int

    frame = spark.range(0, 1003, 1, 5)  # five input partitions of 200 or 201 rows
    spread = _spread(frame, Plan(3))  # type: ignore[arg-type]
    from pyspark.sql import functions as F

    sizes = [r["count"] for r in spread.groupBy(F.spark_partition_id()).count().collect()]
    assert len(sizes) == 3 and max(sizes) - min(sizes) <= 5 and sum(sizes) == 1003
    assert spread.select(ROW).distinct().count() == 1003
