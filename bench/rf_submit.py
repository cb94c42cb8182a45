"""The random forest of bench.service as a plain PySpark script, for a cold ``spark-submit`` of the same work.

Usage: spark-submit bench/rf_submit.py TRAIN EVAL NUM_TREES MAX_DEPTH
"""

from __future__ import annotations

import json
import sys
import time

from pyspark.ml import Pipeline
from pyspark.ml.evaluation import RegressionEvaluator
from pyspark.ml.feature import StandardScaler, VectorAssembler
from pyspark.ml.regression import RandomForestRegressor
from pyspark.sql import SparkSession

FEATURES = [
    "passenger_count", "trip_distance", "pickup_longitude", "pickup_latitude", "rate_code", "dropoff_longitude",
    "dropoff_latitude", "hour", "day_of_week", "is_weekend", "h_distance",
]  # fmt: skip


def main() -> None:
    train_path, eval_path, num_trees, max_depth = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    t0 = time.perf_counter()
    spark = SparkSession.builder.appName("rf-submit").getOrCreate()
    t_session = time.perf_counter() - t0
    train = spark.read.parquet(train_path)
    val = spark.read.parquet(eval_path)
    pipeline = Pipeline(
        stages=[
            VectorAssembler(inputCols=FEATURES, outputCol="raw"),
            StandardScaler(inputCol="raw", outputCol="features", withStd=True),
            RandomForestRegressor(
                featuresCol="features", labelCol="fare_amount", numTrees=num_trees, maxDepth=max_depth, seed=42
            ),
        ]
    )
    model = pipeline.fit(train)
    rmse = RegressionEvaluator(labelCol="fare_amount", metricName="rmse").evaluate(model.transform(val))
    print(json.dumps({"rmse": rmse, "session_s": t_session, "total_in_script_s": time.perf_counter() - t0}))
    spark.stop()


if __name__ == "__main__":
    main()
