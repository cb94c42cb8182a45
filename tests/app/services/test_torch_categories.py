"""A torch request's categorical features are read when it is planned (the network's input width is one column
per category): on the driver for local data, with Spark otherwise, to the same categories; bad columns are 422s
naming them."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from app.core.errors import ValidationFailed
from app.core.settings import Settings
from app.schemas.train import TrainRequest
from app.services.planning.training import plan_training
from workers import plans
from workers.training.torch.config import TorchPlan

OUTPUT = {"type": "output", "units": 1, "activation": "identity", "loss": "mse"}


def _body(uri: str, **dataset: Any) -> dict[str, Any]:
    return {"name": "c", "framework": "torch", "network": {"layers": [OUTPUT]},
            "training": {"num_workers": 1, "batch_size_per_worker": 1},
            "dataset": {"uri": uri, "features": ["distance", "city", "tier"], "label": "fare", "task": "regression",
                        "categorical": ["city", "tier"], **dataset}}  # fmt: skip


def _plan(spark: Any, root: Path, body: dict[str, Any], *, probe: bool = True) -> TorchPlan:
    tracker, group = spark.sparkContext.statusTracker(), f"categories-probe-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, group)
    try:
        plan = plan_training(request=TrainRequest.model_validate(body), settings=Settings(data_roots=[root]),
                             spark=spark)  # fmt: skip
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    if probe:  # local data: read on the driver, no Spark job
        assert tracker.getJobIdsForGroup(group) == []
    assert isinstance(plan, TorchPlan)
    return plan


@pytest.fixture
def fares(tmp_path: Path) -> Path:
    # "02" is the whole number 2 (Spark reads the column as int); an empty city is a null, not a category
    (tmp_path / "fares.csv").write_text(
        "distance,city,tier,fare\n1.0,north,1,3.0\n2.0,south,02,4.0\n3.0,,3,5.0\n4.0,east,2,6.0\n5.0,north,3,7.0\n"
    )
    return tmp_path


def test_local_csv_is_read_on_the_driver_and_the_width_follows_the_categories(spark: Any, fares: Path) -> None:
    plan = _plan(spark, fares, _body("fares.csv"))
    assert plan.categorical == {"inputs": ["distance", "city", "tier"], "types": {"city": "string", "tier": "int"},
                                "levels": {"city": ["east", "north", "south"], "tier": ["1", "2", "3"]}}  # fmt: skip
    assert plan.input_shape == (7,) and plan.network["input_shape"] == [7]
    assert plan.features == ("distance", "city=east", "city=north", "city=south", "tier=1", "tier=2", "tier=3")
    assert plans.load(TorchPlan, json.loads(json.dumps(plans.dump(plan)))) == plan


def test_spark_reads_the_same_categories_where_the_driver_cannot(spark: Any, fares: Path) -> None:
    local = _plan(spark, fares, _body("fares.csv"))
    # a reader option the driver's sample reader does not know: Spark reads the schema and the categories
    read = _plan(spark, fares, _body("fares.csv", options={"lineSep": "\n"}), probe=False)
    assert read.categorical == local.categorical and read.input_shape == local.input_shape


def test_local_parquet_categories_of_each_type(spark: Any, tmp_path: Path) -> None:
    frame = pd.DataFrame({"distance": [1.0, 2.0, 3.0], "city": ["b", "a", "b"], "tier": [3, 1, 3],
                          "member": [True, False, True], "fare": [1.0, 2.0, 3.0]})  # fmt: skip
    frame.to_parquet(tmp_path / "f.parquet")
    body = _body("f.parquet", features=["distance", "city", "tier", "member"], categorical=["city", "tier", "member"])
    plan = _plan(spark, tmp_path, body)
    assert plan.categorical is not None
    assert plan.categorical["levels"] == {"city": ["a", "b"], "tier": ["1", "3"], "member": ["false", "true"]}
    assert plan.input_shape == (7,)


def test_a_column_of_identifiers_or_of_nulls_is_a_422_naming_it(spark: Any, tmp_path: Path) -> None:
    frame = pd.DataFrame({"distance": range(1200), "city": [f"c{i}" for i in range(1200)], "tier": [None] * 1200,
                          "fare": range(1200)})  # fmt: skip
    frame.to_csv(tmp_path / "ids.csv", index=False)
    with pytest.raises(ValidationFailed) as error:
        _plan(spark, tmp_path, _body("ids.csv", features=["distance", "city"], categorical=["city"]))
    assert error.value.problem()["errors"][0]["loc"] == "dataset.categorical[0]"
    assert "'city' has more than 1000 distinct values" in error.value.detail
    frame.assign(city="a", tier="").to_csv(tmp_path / "nulls.csv", index=False)
    with pytest.raises(ValidationFailed) as error:
        _plan(spark, tmp_path, _body("nulls.csv", features=["distance", "city", "tier"]))
    assert error.value.problem()["errors"][0]["loc"] in ("dataset.categorical[1]", "dataset.features")
