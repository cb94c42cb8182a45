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


def test_the_vectorized_hash_is_sparks_with_any_seed(spark: Any) -> None:
    """``spark_hash`` (uint32 numpy, used by the tasks that split their own rows) against Spark's ``hash(s, v)``,
    which is Murmur3 of v seeded with Murmur3 of s: every seed, including negative ones, and extreme values."""
    import numpy as np
    from pyspark.sql import functions as F

    from workers.data.arrow_read import spark_hash

    values = [0, 1, -1, 2**31, -(2**63), 2**63 - 1, 123456789012345]
    seeds = [0, 7, -7, 2**31 - 1]
    rows = [(s, v) for s in seeds for v in values]
    frame = spark.createDataFrame(rows, "s long, v long")
    hashed = frame.select(F.hash("s").alias("seed"), F.hash("s", "v").alias("h")).collect()
    ours = spark_hash(np.array([v for _, v in rows]), np.array([r["seed"] for r in hashed]))
    assert [int(h) for h in ours] == [r["h"] for r in hashed]
    assert [int(h) for h in spark_hash(np.array(values), 42)] == [spark_hash_long(v) for v in values]


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


def test_tasks_read_the_rows_spark_counted(spark: Any, tmp_path: Any) -> None:
    """A local parquet directory read by the tasks themselves: the shares cover every row once in file order, and
    each row's split is the one the Spark bad-row pass counts with."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from workers.data.arrow_read import file_rows, held_out, local_files, read_share, shares
    from workers.training.torch.prepare import split_column

    for i, n in enumerate((1000, 537)):
        table = pa.table(
            {"x": np.arange(n, dtype=np.float64) + 10_000 * i, "y": ["a", "b", "c"] * (n // 3) + ["a"] * (n % 3)}
        )
        pq.write_table(table, tmp_path / f"part-{i}.parquet", row_group_size=300)
    files = local_files(str(tmp_path))
    assert files is not None
    rows = file_rows(files)
    split = split_column(files, rows, 7, 0.2)
    got = spark.read.parquet(str(tmp_path)).select("x", split.alias("s")).collect()
    by_x = {r["x"]: r["s"] for r in got}
    spec = {"files": files, "rows": rows, "shares": shares(sum(rows), 3), "columns": ["x", "y"], "label": "y",
            "class_labels": ["a", "b", "c"], "seed": 7, "fraction": 0.2}  # fmt: skip
    parts = [read_share(spec, r, "_split", "_row") for r in range(3)]
    whole = pa.concat_tables(parts)
    assert whole.column("_row").to_pylist() == list(range(1537))
    assert whole.column("x").to_pylist() == [float(v) for v in [*range(1000), *range(10_000, 10_537)]]
    assert whole.column("_split").to_pylist() == [by_x[x] for x in whole.column("x").to_pylist()]
    assert held_out(np.arange(1537), 7, 0.2).sum() == sum(by_x.values()) and 200 < sum(by_x.values()) < 420
    assert set(whole.column("y").to_pylist()) == {0, 1, 2}
    assert [p.num_rows for p in parts] == [512, 512, 513]
    assert spark.read.parquet(str(tmp_path)).where(F.col("x") < 0).count() == 0


def _checked_in_a_barrier_stage(spark: Any, spec: dict[str, Any], workers: int) -> list[Any]:
    """Each task of a real barrier stage reads its share and checks it, sharing counts through ``allGather``."""

    def task(_rows: Any) -> Any:
        from pyspark import BarrierTaskContext

        from workers.data.arrow_read import DataFailure, check_share, read_share

        context = BarrierTaskContext.get()
        share = read_share(spec, context.partitionId(), "_split", "_row")
        try:
            yield ("ok", check_share(share, spec, "_split", context.allGather))
        except DataFailure as exc:
            yield (exc.reason, exc.message)

    return spark.sparkContext.parallelize(range(workers), workers).barrier().mapPartitions(task).collect()


def test_tasks_check_their_own_rows_and_fail_alike(spark: Any, tmp_path: Any) -> None:
    """No Spark job before the stage: the tasks find the bad rows of their shares (a NaN, a null, a negative weight,
    an unknown class), and every rank reports the one failure with the total count and the first rows in the
    driver's words; clean data gives the counts of the split."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from workers.data.arrow_read import file_rows, held_out, shares

    n = 1000
    x = np.linspace(0, 1, n)
    w = np.ones(n)
    y = ["a", "b"] * (n // 2)
    table = pa.table({"x": x, "w": w, "y": y})
    pq.write_table(table, tmp_path / "good.parquet", row_group_size=300)
    x[10], w[900], y[950] = np.nan, -1.0, "zz"
    bad = pa.table({"x": [*x[:700].tolist(), None, *x[701:].tolist()], "w": w, "y": y})
    pq.write_table(bad, tmp_path / "bad.parquet", row_group_size=300)
    check = {"columns": [["x", "float"], ["y", "int"], ["w", "float"]], "array_length": None, "weight": "w",
             "label": "y", "num_classes": 2, "reasons": "REASONS", "path": "bad.parquet", "workers": 2,
             "batch_size": 8, "needs_validation": None}  # fmt: skip

    def spec(name: str) -> dict[str, Any]:
        files = [str(tmp_path / name)]
        return {"files": files, "rows": file_rows(files), "shares": shares(n, 2), "columns": ["x", "y", "w"],
                "label": "y", "class_labels": ["a", "b"], "seed": 7, "fraction": 0.2, "check": check}  # fmt: skip

    failed = _checked_in_a_barrier_stage(spark, spec("bad.parquet"), 2)
    assert failed[0] == failed[1] and failed[0][0] == "BAD_ROWS"
    message = failed[0][1]
    assert message.startswith("4 rows of bad.parquet have REASONS in x, y, w; first ones: [")
    for reason in ("x is NaN or infinite", "x is null", "w is negative", "y is not a class in 0..1"):
        assert f'"reason": "{reason}"' in message  # JSON, for a script to parse
    assert message.endswith('Fix the data or set dataset.bad_rows to "skip" to drop them.')

    counted = _checked_in_a_barrier_stage(spark, spec("good.parquet"), 2)
    held = int(held_out(np.arange(n), 7, 0.2).sum())
    assert counted == [("ok", {"train": n - held, "validation": held, "bad_rows": 0})] * 2
    few = _checked_in_a_barrier_stage(spark, {**spec("good.parquet"), "check": {**check, "batch_size": 500}}, 2)
    assert few[0][0] == "EMPTY_PARTITION" and few[0][1].startswith(f"{n - held} training rows cannot give 2 workers")
