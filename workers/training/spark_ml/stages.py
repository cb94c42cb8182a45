"""How many Spark stages a Spark ML fit runs, estimated before it starts, so that its bar moves with the work
(``workers.spark_progress.band_fraction``) instead of halving what is left at each stage.

Counted on a local SparkSession with pyspark 4 (a fit through ``driver.train``): a random forest grows its trees
level by level, one Spark job of two stages (a shuffle and its result) per level, plus about six for the splits'
sample and the metadata (two more for a classifier's labels); the scaler's fit is two more. Linear and logistic
regression by L-BFGS or OWL-QN run one tree aggregation per iteration (two stages where the data has more than a
few partitions, one otherwise), up to ``maxIter`` (fewer where they converge first); the normal equations of a
squared-error linear regression are one pass. An estimate need not be exact: past it the bar still moves, by
halving what is left of its last tenth.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workers.training.spark_ml.spec import SparkMLSpec

SCALER_STAGES = 2
EVALUATION_STAGES = 2
"""An evaluator's pass over a cross-validation fold's predictions."""
_DEFAULT_DEPTH = 5  # Spark's defaults
_DEFAULT_ITER = 100


def expected_stages(spec: SparkMLSpec, params: Mapping[str, Any] | None = None) -> int | None:
    """The Spark stages of one fit of ``spec``'s pipeline with ``params`` (a grid's values) over the fixed ones;
    None for an estimator it does not know."""
    values = {**spec.params, **(params or {})}
    scaler = SCALER_STAGES if spec.standardize else 0
    if spec.algorithm == "random_forest":
        return 2 * int(values.get("maxDepth", _DEFAULT_DEPTH)) + 6 + scaler
    if spec.algorithm == "linear_regression" and values.get("loss", "squaredError") == "squaredError" \
            and values.get("solver", "auto") != "l-bfgs":  # fmt: skip
        return 3 + scaler  # Spark's "auto" takes the normal equations up to 4,096 features
    if spec.algorithm in ("linear_regression", "logistic_regression"):
        return 2 * int(values.get("maxIter", _DEFAULT_ITER)) + 4 + scaler
    return None
