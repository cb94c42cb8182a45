"""A dataset as the job runner hands it to a family driver: already resolved and checked on the driver."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Task = Literal["classification", "regression"]


@dataclass(frozen=True)
class ResolvedDataset:
    path: str
    """An absolute path or URI that Spark on the executors can read."""
    format: Literal["parquet", "csv", "json"]
    features: tuple[str, ...]
    label: str | None
    task: Task | None
    num_classes: int | None = None
    bad_rows: Literal["fail", "skip"] = "fail"
    key: str | None = None
    options: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "features": list(self.features),
            "label": self.label,
            "task": self.task,
            "num_classes": self.num_classes,
            "bad_rows": self.bad_rows,
            "key": self.key,
            "options": dict(self.options),
        }


def read_dataframe(spark: SparkSession, ds: ResolvedDataset) -> DataFrame:
    reader = spark.read.format(ds.format)
    if ds.format == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    return reader.options(**ds.options).load(ds.path)
