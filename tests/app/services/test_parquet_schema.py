"""A local parquet dataset's schema is read from its footer on the driver, exactly as Spark would infer it, so
checking a request runs no Spark job (one would wait for a task slot while a barrier stage holds them all)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from app.services.datasets import parquet_schema, read_schema

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
    spark.createDataFrame(frame).write.partitionBy("name").parquet(str(tmp_path / "partitioned"))
    assert parquet_schema(str(tmp_path / "partitioned")) is None  # partition columns: Spark decides
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    assert parquet_schema(str(tmp_path / "bad.parquet")) is None
    assert parquet_schema("s3a://bucket/data.parquet") is None


def test_reading_a_schema_runs_no_spark_job(spark: Any) -> None:
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("schema-probe", "schema-probe")
    try:
        schema = read_schema(spark, str(REPO / "datasets/taxi/train.parquet"), "parquet", {}, loc="dataset.uri")
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert schema["fare_amount"] == "double"
    assert tracker.getJobIdsForGroup("schema-probe") == []
