"""Planning every example request: the plan survives its trip through the job's JSON column unchanged (what the
runner executes is what the request checked), and on local parquet no family's planning runs a Spark job (one
would wait for a free task slot while a barrier stage holds them all)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from app.core.settings import Settings
from app.schemas.train import TrainRequest
from app.services.planning.training import plan_training
from workers import plans
from workers.families import plan_type
from workers.inference.spec import EvaluationPlan, ModelRef, PredictionPlan
from workers.recipes.gpu_smoke import GpuSmokePlan
from workers.training.torch.config import ResumePoint

REPO = Path(__file__).resolve().parents[3]
TRAINING_EXAMPLES = ["digits-cnn", "taxi-mlp", "linear-regression", "xgboost-taxi", "random-forest-cv",
                     "linear-regression-spark-ml"]  # fmt: skip


def _plan_without_spark_jobs(spark: Any, body: dict[str, Any], roots: list[Path]) -> Any:
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("plan-probe", "plan-probe")
    try:
        plan = plan_training(
            request=TrainRequest.model_validate(body), settings=Settings(data_roots=roots), spark=spark
        )
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert tracker.getJobIdsForGroup("plan-probe") == []
    return plan


def _round_trip(plan: Any) -> Any:
    return plans.load(type(plan), json.loads(json.dumps(plans.dump(plan))))


@pytest.mark.parametrize("example", TRAINING_EXAMPLES)
def test_every_example_plans_without_spark_and_its_plan_survives_storage(spark: Any, example: str) -> None:
    body = json.loads((REPO / "examples" / f"{example}.json").read_text())
    plan = _plan_without_spark_jobs(spark, body, [REPO / "datasets"])
    assert type(plan) is plan_type("train", body["framework"], None)
    assert _round_trip(plan) == plan
    assert not getattr(plan, "warnings", ()), plan.warnings  # an example uses every setting it gives


def test_a_resume_point_and_the_other_plans_survive_storage(spark: Any) -> None:
    body = json.loads((REPO / "examples/digits-cnn.json").read_text())
    plan = _plan_without_spark_jobs(spark, body, [REPO / "datasets"])
    resumed = replace(plan, resume=ResumePoint(checkpoint_id="c" * 32, path="file:///x/epoch-2", epoch=2, job_id="j"))
    assert _round_trip(resumed) == resumed
    model = ModelRef(framework="torch", uri="file:///m", card={"features": ["pixels"], "input_shape": [1, 8, 8]},
                     name="digits-cnn", version=3)  # fmt: skip
    for other in (
        EvaluationPlan(model=model, dataset=plan.train, groups=("classification", "roc"), top_k=(1, 3)),
        PredictionPlan(model=model, dataset=plan.train, key="id", output_path="/tmp/out", batch_size=64),
        GpuSmokePlan(rows=10, partitions=2, device="cpu"),
    ):
        assert _round_trip(other) == other


def test_settings_the_job_would_not_use_are_warned_about(spark: Any) -> None:
    body = json.loads((REPO / "examples/digits-cnn.json").read_text())
    body["training"] = {**body["training"], "mode": "allreduce", "averaging_frequency": 10}
    warnings = _plan_without_spark_jobs(spark, body, [REPO / "datasets"]).warnings
    ignored = [w.split(" is ignored")[0] for w in warnings]
    assert ignored == ["training.gradient_sharing", "training.averaging_frequency"]
    assert all(w.endswith("this job runs allreduce") for w in warnings), warnings
    small = json.loads((REPO / "examples/taxi-mlp.json").read_text())
    small["training"] = {**small["training"], "mode": "gradient_sharing",
                         "gradient_sharing": {"threshold_algorithm": {"type": "fixed", "threshold": 0.05}}}  # fmt: skip
    (warning,) = _plan_without_spark_jobs(spark, small, [REPO / "datasets"]).warnings
    assert warning.startswith("training.gradient_sharing.threshold_algorithm does not apply: the network's ")
    assert "exchanged exactly on every step" in warning and "exact_below_bytes to 0" in warning
    # every such setting is named (the warning named the first of them)
    small["training"]["gradient_sharing"].update(bitmap_ratio=8, encoding_debug=True)
    warnings = _plan_without_spark_jobs(spark, small, [REPO / "datasets"]).warnings
    assert [w.split(" does not apply: the network's ")[0] for w in warnings] == [
        f"training.gradient_sharing.{name}" for name in ("bitmap_ratio", "encoding_debug", "threshold_algorithm")
    ]
    small["training"]["gradient_sharing"]["exact_below_bytes"] = 0
    assert _plan_without_spark_jobs(spark, small, [REPO / "datasets"]).warnings == ()
    # one worker thresholds with nobody to share with (it said nothing: walkthrough)
    small["training"]["num_workers"] = 1
    (warning,) = _plan_without_spark_jobs(spark, small, [REPO / "datasets"]).warnings
    assert warning.startswith("training.num_workers is 1: gradient sharing has no other worker to share with")


def test_a_validation_fraction_beside_a_validation_set_is_warned_about(spark: Any) -> None:
    body = json.loads((REPO / "examples/taxi-mlp.json").read_text())
    body["validation"] = {"uri": "datasets/taxi/eval.parquet"}
    assert _plan_without_spark_jobs(spark, body, [REPO / "datasets"]).warnings == ()
    body["training"] = {**body["training"], "validation_fraction": 0.3}
    warnings = _plan_without_spark_jobs(spark, body, [REPO / "datasets"]).warnings
    assert warnings == ("training.validation_fraction is not used: validation names the validation data",)


def test_a_stored_request_planned_again_is_not_warned_about_its_defaults(spark: Any) -> None:
    """A job whose checks were left to it plans the request as stored, every default spelled out: each torch job
    with categorical features or remote data was warned about an averaging_frequency and a validation_fraction
    it never gave (torch walkthrough)."""
    body = json.loads((REPO / "examples/taxi-mlp.json").read_text())
    body["validation"] = {"uri": "datasets/taxi/eval.parquet"}
    stored = TrainRequest.model_validate(body).model_dump(mode="json", exclude_none=True)  # as app/services/jobs.py
    assert "averaging_frequency" in stored["training"] and "validation_fraction" in stored["training"]
    assert _plan_without_spark_jobs(spark, stored, [REPO / "datasets"]).warnings == ()


def test_a_validation_file_may_hold_numbers_of_another_width(spark: Any, tmp_path: Path) -> None:
    """int in one file and bigint in the other (a CSV's inference and a JSON file's differ): both are numbers to
    every family. A string against a number is still a 422."""
    from app.core.errors import ValidationFailed

    taxi = pd.read_parquet(REPO / "datasets/taxi/eval.parquet")
    taxi.astype({"passenger_count": "int64"}).to_parquet(tmp_path / "wide.parquet")
    taxi.astype({"passenger_count": "str"}).to_parquet(tmp_path / "text.parquet")
    body = json.loads((REPO / "examples/xgboost-taxi.json").read_text())
    body["validation"] = {"uri": str(tmp_path / "wide.parquet")}
    plan = _plan_without_spark_jobs(spark, body, [REPO / "datasets", tmp_path])
    assert plan.train.column_types["passenger_count"] == "int"
    body["validation"] = {"uri": str(tmp_path / "text.parquet")}
    with pytest.raises(ValidationFailed, match="'passenger_count' is string; features must be numeric"):
        _plan_without_spark_jobs(spark, body, [REPO / "datasets", tmp_path])


def test_partitioned_local_parquet_plans_without_spark(spark: Any, tmp_path: Path) -> None:
    """Hive-style partition directories are local parquet too: the label of a partition column, the classes and an
    array column's width are all read on the driver."""
    digits = pd.read_parquet(REPO / "datasets/digits/train.parquet").head(300)
    spark.createDataFrame(digits).write.partitionBy("label").parquet(str(tmp_path / "by-label"))
    dataset = {"uri": "by-label", "features": ["pixels"], "label": "label", "task": "classification"}
    output = {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}
    body = {"name": "d", "framework": "torch", "network": {"layers": [output]}, "dataset": dataset}
    plan = _plan_without_spark_jobs(spark, body, [tmp_path])
    assert (plan.input_shape, plan.train.num_classes) == ((64,), int(digits["label"].max()) + 1)
    xgb = {"name": "x", "framework": "xgboost", "params": {"num_round": 5}, "dataset": dataset}
    with pytest.raises(Exception, match="numeric columns"):  # xgboost takes columns, not an array: still no job
        _plan_without_spark_jobs(spark, xgb, [tmp_path])


def test_early_stopping_is_planned_and_a_metric_the_job_does_not_compute_is_a_422(spark: Any) -> None:
    from app.core.errors import ValidationFailed

    body = json.loads((REPO / "examples/taxi-mlp.json").read_text())
    body["training"]["early_stopping"] = {"metric": "val_rmse", "patience": 2, "max_minutes": 30}
    plan = _plan_without_spark_jobs(spark, body, [REPO / "datasets"])
    assert plan.early_stopping == {"metric": "val_rmse", "mode": "min", "patience": 2, "min_delta": 0.0,
                                   "max_minutes": 30.0, "restore_best": True}  # fmt: skip
    assert _round_trip(plan) == plan
    assert plan.train.column_types["passenger_count"] == "int" and plan.train.column_types["trip_distance"] == "double"
    body["training"]["early_stopping"] = {"metric": "val_accuracy"}  # a regression computes no accuracy
    with pytest.raises(ValidationFailed) as error:
        plan_training(request=TrainRequest.model_validate(body), settings=Settings(data_roots=[REPO / "datasets"]),
                      spark=spark)  # fmt: skip
    assert error.value.problem()["errors"][0]["loc"] == "training.early_stopping.metric"
    assert "val_loss, val_rmse" in error.value.detail


def test_data_the_driver_cannot_read_defers_its_checks_and_the_rest_is_still_checked(
    spark: Any, tmp_path: Path
) -> None:
    """CSV with a reader option the sample reader does not know: planning in a request stops before the Spark job
    that would read the schema; the deferred plan holds what was left and the job's slots, and what needs nothing
    of the data (the service's limits here) is still a 422."""
    from app.core.errors import ValidationFailed
    from app.services.datasets.deferred import DeferredCheck, request_without_spark
    from app.services.planning.training import plan_deferred

    pd.DataFrame({"a": [1.0, 2.0], "b": [3, 4]}).to_csv(tmp_path / "t.csv", index=False)
    output = {"type": "output", "units": 1, "activation": "identity", "loss": "mse"}
    body = {"name": "d", "framework": "torch", "network": {"layers": [output]}, "training": {"num_workers": 2},
            "dataset": {"uri": "t.csv", "features": ["a"], "label": "b", "task": "regression",
                        "options": {"lineSep": "\n"}}}  # fmt: skip
    settings = Settings(data_roots=[tmp_path])
    request = TrainRequest.model_validate(body)
    with request_without_spark(), pytest.raises(DeferredCheck) as deferred:
        _plan_without_spark_jobs(spark, body, [tmp_path])
    assert "the schema of" in deferred.value.what and "sample reader does not know" in deferred.value.what
    plan = plan_deferred(request=request, settings=settings, spark=spark, db=None, deferred=deferred.value.what)
    assert plan.num_workers == 2 and plans.is_deferred(plans.dump(plan)) and _round_trip(plan) == plan
    over = request.model_copy(update={"training": request.training.model_copy(update={"epochs": 10**6})})
    with pytest.raises(ValidationFailed, match=r"training\.epochs"):
        plan_deferred(request=over, settings=settings, spark=spark, db=None, deferred="x")


def test_validation_rows_may_not_be_training_rows() -> None:
    from app.core.errors import ValidationFailed
    from app.services.planning.training import _check_apart

    _check_apart("/d/taxi", "/d/taxi/_val.parquet", "taxi")  # Spark skips _ and . names: never trained on
    _check_apart("/d/taxi", "/d/taxi/.held/x.parquet", "taxi")
    _check_apart("/d/taxi", "/d/taxi-eval.parquet", "taxi")  # a sibling whose name starts the same
    for validation in ("/d/taxi", "/d/taxi/eval.parquet", "/d/taxi/2026/eval.parquet"):
        with pytest.raises(ValidationFailed, match="training data"):
            _check_apart("/d/taxi", validation, "taxi")


@pytest.mark.parametrize(("example", "workers"), [("taxi-mlp", "training"), ("xgboost-taxi", "params")])
def test_more_workers_than_slots_is_a_422_that_counts_in_words(spark: Any, example: str, workers: str) -> None:
    from app.core.errors import ValidationFailed

    body = json.loads((REPO / "examples" / f"{example}.json").read_text())
    body[workers] = {**body[workers], "num_workers": 3}
    with pytest.raises(ValidationFailed) as refused:
        _plan_without_spark_jobs(spark, body, [REPO / "datasets"])
    (error,) = refused.value.errors
    assert error["loc"] == f"{workers}.num_workers"
    assert error["msg"].startswith("3 workers need 3 task slots at once (")
    assert error["msg"].endswith("and this cluster has 2 task slots; lower num_workers or add executors")
