"""A local parquet dataset's schema is read from its footer on the driver, exactly as Spark would infer it, so
checking a request runs no Spark job (one would wait for a task slot while a barrier stage holds them all)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from app.services.datasets.schema import parquet_schema, read_schema

REPO = Path(__file__).resolve().parents[3]
SHIPPED = sorted(str(p.relative_to(REPO)) for p in (REPO / "datasets").rglob("*.parquet"))


@pytest.mark.parametrize("name", SHIPPED)
def test_the_footer_gives_sparks_schema(spark: Any, name: str) -> None:
    path = str(REPO / name)
    assert parquet_schema(path) == dict(spark.read.parquet(path).dtypes)


def test_a_directory_of_part_files_and_the_cases_left_to_spark(spark: Any, tmp_path: Path) -> None:
    frame = pd.DataFrame({"id": np.arange(10), "x": np.linspace(0, 1, 10), "v": [[1.0, 2.0]] * 10,
                          "name": list("abcdefghij")})  # fmt: skip
    spark.createDataFrame(frame).repartition(3).write.parquet(str(tmp_path / "parts"))
    assert parquet_schema(str(tmp_path / "parts")) == dict(spark.read.parquet(str(tmp_path / "parts")).dtypes)
    dated = frame.assign(day=[f"2026-01-{d:02d}" for d in range(1, 11)])
    spark.createDataFrame(dated).write.partitionBy("day").parquet(str(tmp_path / "dated"))
    assert parquet_schema(str(tmp_path / "dated")) is None  # Spark reads these values as dates: it decides
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    assert parquet_schema(str(tmp_path / "bad.parquet")) is None
    assert parquet_schema("s3a://bucket/data.parquet") is None


@pytest.mark.parametrize(
    ("by", "values"),
    [
        ("name", list("abcdefghij")),
        ("bucket", [0, 1, 2, 3, 4] * 2),
        ("big", [2**40 + i for i in range(10)]),
        ("ratio", [0.5, 1.0, 1.5, 2.0, 2.5] * 2),
        ("mixed", [1, 2.5] * 5),
    ],
)
def test_partition_directories_give_sparks_schema(spark: Any, tmp_path: Path, by: str, values: list[Any]) -> None:
    """Partition columns (``key=value`` directories) get the types Spark infers from the values, in its order."""
    frame = pd.DataFrame({"id": np.arange(10), "x": np.linspace(0, 1, 10), "v": [[1.0, 2.0]] * 10, by: values})
    spark.createDataFrame(frame).write.partitionBy(by).parquet(str(tmp_path / "partitioned"))
    expected = spark.read.parquet(str(tmp_path / "partitioned")).dtypes
    assert list(parquet_schema(str(tmp_path / "partitioned")) or {}) == [name for name, _ in expected]
    assert parquet_schema(str(tmp_path / "partitioned")) == dict(expected)


def test_reading_a_schema_runs_no_spark_job(spark: Any) -> None:
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("schema-probe", "schema-probe")
    try:
        schema = read_schema(spark, str(REPO / "datasets/taxi/train.parquet"), "parquet", {}, loc="dataset.uri")
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert schema["fare_amount"] == "double"
    assert tracker.getJobIdsForGroup("schema-probe") == []


def _planned_without_spark_jobs(spark: Any, body: dict[str, Any], roots: list[Path]) -> Any:
    from app.core.settings import Settings
    from app.schemas.train import TrainRequest
    from app.services.planning.training import plan_training

    settings = Settings(data_roots=roots)
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("plan-probe", "plan-probe")
    try:
        plan = plan_training(request=TrainRequest.model_validate(body), settings=settings, spark=spark)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert tracker.getJobIdsForGroup("plan-probe") == []
    return plan


MLP = {"layers": [{"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}]}


def test_planning_reads_array_widths_and_classes_of_small_local_data_without_spark(spark: Any, tmp_path: Path) -> None:
    """What a request must look up in the data (an array column's width, the number of classes, string class
    names) is read on the driver for small local parquet: the answer does not wait for a free task slot."""
    digits = {"name": "d", "framework": "torch", "network": MLP,
              "dataset": {"uri": "digits/train.parquet", "features": ["pixels"], "label": "label",
                          "task": "classification"}}  # fmt: skip
    plan = _planned_without_spark_jobs(spark, digits, [REPO / "datasets"])
    assert (plan.input_shape, plan.train.num_classes) == ((64,), 10)

    named = pd.read_parquet(REPO / "datasets/digits/train.parquet").head(200)
    named["label"] = named["label"].map(lambda d: f"digit-{d}")
    named.to_parquet(tmp_path / "named.parquet")
    body = {**digits, "dataset": {**digits["dataset"], "uri": "named.parquet"}}
    plan = _planned_without_spark_jobs(spark, body, [tmp_path])
    assert plan.class_labels == tuple(sorted({f"digit-{d}" for d in range(10)}))
    assert plan.train.num_classes == 10


@pytest.mark.parametrize("name", SHIPPED)
def test_registering_local_parquet_reads_what_spark_reads_without_a_spark_job(spark: Any, name: str) -> None:
    """POST /datasets on local parquet: the columns, the row count and the sample rows Spark would give."""
    from app.services.datasets.registry import SAMPLE_ROWS, _jsonable
    from app.services.datasets.schema import local_summary

    path = str(REPO / name)
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("register-probe", "register-probe")
    try:
        summary = local_summary(path, "parquet", {}, sample_rows=SAMPLE_ROWS)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert tracker.getJobIdsForGroup("register-probe") == []
    assert summary is not None
    columns, rows, sample, malformed, _first = summary
    assert malformed == 0
    frame = spark.read.parquet(path)
    expected = [{"name": f.name, "type": f.dataType.simpleString(), "nullable": f.nullable} for f in frame.schema]
    assert (columns, rows) == (expected, frame.count())
    spark_sample = [_jsonable(r.asDict(recursive=True)) for r in frame.limit(SAMPLE_ROWS).collect()]
    assert [_jsonable(r) for r in sample] == spark_sample


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["a", "e", "europe", "test"], "string"),  # the letter e is no exponent
        (["1", "2", "-3", "+4", "007"], "int"),
        (["1", str(2**40)], "bigint"),
        (["1.5", ".5", "-2.0"], "double"),
        (["1", "2.5"], "double"),
        ([str(2**40), "1.5"], "string"),  # long and double widen to string in Spark
        (["a", "1"], "string"),
        (["__HIVE_DEFAULT_PARTITION__"], "string"),
        (["1", "__HIVE_DEFAULT_PARTITION__"], "int"),
        (["1e5"], None),  # a decimal to Spark
        ([str(2**70)], None),
        (["2."], None),
        (["2026-01-01"], None),
        (["2026-01-01 10:00:00"], None),
        (["NaN"], None),
        (["Infinity"], None),
        ([" 5"], None),
        (["v1", "a"], None),
    ],
)
def test_partition_values_get_sparks_type_or_are_left_to_spark(values: list[str], expected: str | None) -> None:
    from app.services.datasets.schema import partition_type

    for order in (values, list(reversed(values))):
        assert partition_type(set(order)) == expected


def test_partitions_reached_through_links_are_left_to_spark(spark: Any, tmp_path: Path) -> None:
    frame = pd.DataFrame({"x": np.arange(4.0), "k": [1, 1, 2, 2]})
    spark.createDataFrame(frame).write.partitionBy("k").parquet(str(tmp_path / "real"))
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "k=1").symlink_to(tmp_path / "real" / "k=1")
    (tmp_path / "linked" / "k=2").symlink_to(tmp_path / "real" / "k=2")
    assert parquet_schema(str(tmp_path / "real")) == {"x": "double", "k": "int"}
    assert parquet_schema(str(tmp_path / "linked")) is None


def test_a_spark_error_is_told_by_the_java_exceptions_line() -> None:
    from app.services.datasets.schema import spark_reason

    py4j = Exception(
        "An error occurred while calling o8801.load.\n"
        ": org.apache.spark.SparkException: [CANNOT_READ_FILE_FOOTER] Could not read footer for file x.csv.\n"
        "\tat org.apache.spark.sql.errors..."
    )
    assert spark_reason(py4j).startswith("org.apache.spark.SparkException: [CANNOT_READ_FILE_FOOTER]")
    assert spark_reason(ValueError("plain")) == "plain" and spark_reason(ValueError()) == "ValueError"
