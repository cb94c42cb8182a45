"""A torch request's categorical features are read when it is planned (the network's input width is one column
per category): a request checks itself against the categories the driver reads, then leaves the plan to the job,
whose categories are Spark's, the reading that one-hot encodes the rows; a model it starts from keeps its own;
bad columns are 422s naming them."""

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
from app.services.datasets.deferred import DeferredCheck, request_without_spark
from app.services.planning.training import plan_training
from workers import plans
from workers.training.torch.config import TorchPlan

OUTPUT = {"type": "output", "units": 1, "activation": "identity", "loss": "mse"}


def _body(uri: str, **dataset: Any) -> dict[str, Any]:
    return {"name": "c", "framework": "torch", "network": {"layers": [OUTPUT]},
            "training": {"num_workers": 1, "batch_size_per_worker": 1},
            "dataset": {"uri": uri, "features": ["distance", "city", "tier"], "label": "fare", "task": "regression",
                        "categorical": ["city", "tier"], **dataset}}  # fmt: skip


def _plan(spark: Any, root: Path, body: dict[str, Any]) -> TorchPlan:
    plan = plan_training(request=TrainRequest.model_validate(body), settings=Settings(data_roots=[root]), spark=spark)
    assert isinstance(plan, TorchPlan)
    return plan


def _in_request(spark: Any, root: Path, body: dict[str, Any]) -> str:
    """What a request leaves to the job, planning without a Spark job (it would wait for a task slot)."""
    tracker, group = spark.sparkContext.statusTracker(), f"categories-probe-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, group)
    try:
        with request_without_spark(), pytest.raises(DeferredCheck) as deferred:
            _plan(spark, root, body)
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert tracker.getJobIdsForGroup(group) == []
    return deferred.value.what


def _encoded_once(spark: Any, plan: TorchPlan) -> None:
    """Every row with a category has exactly one 1 among its column's one-hot columns (none is all zeros)."""
    from pyspark.sql import functions as F

    from workers.data.one_hot import expand
    from workers.data.spec import read_dataframe

    categories = plan.categories
    assert categories is not None
    frame = expand(categories, read_dataframe(spark, plan.train))
    for column in categories.levels:
        names = [n for n in categories.names if n.startswith(column.replace(".", "_") + "=")]
        total = sum((F.col(f"`{n}`") for n in names), F.lit(0.0))
        counts = frame.where(F.col(f"`{column}`").isNotNull()).select(total.alias("t")).distinct().collect()
        assert {r["t"] for r in counts} == {1.0}, (column, categories.levels[column], counts)


@pytest.fixture
def fares(tmp_path: Path) -> Path:
    # "02" is the whole number 2 (Spark reads the column as int); an empty city is a null, not a category
    (tmp_path / "fares.csv").write_text(
        "distance,city,tier,fare\n1.0,north,1,3.0\n2.0,south,02,4.0\n3.0,,3,5.0\n4.0,east,2,6.0\n5.0,north,3,7.0\n"
    )
    return tmp_path


def test_a_request_checks_itself_then_the_job_plans_with_sparks_categories(spark: Any, fares: Path) -> None:
    assert "the categories of city, tier in" in _in_request(spark, fares, _body("fares.csv"))
    regression = {"type": "output", "units": 3, "activation": "softmax", "loss": "cross_entropy"}
    with request_without_spark(), pytest.raises(ValidationFailed) as error:  # a 422 at once, not in the job
        _plan(spark, fares, {**_body("fares.csv"), "network": {"layers": [regression]}})
    assert error.value.problem()["errors"][0]["loc"].startswith("network")
    plan = _plan(spark, fares, _body("fares.csv"))  # in the job
    assert plan.categorical == {"inputs": ["distance", "city", "tier"], "types": {"city": "string", "tier": "int"},
                                "levels": {"city": ["east", "north", "south"], "tier": ["1", "2", "3"]}}  # fmt: skip
    assert plan.input_shape == (7,) and plan.network["input_shape"] == [7]
    assert plan.features == ("distance", "city=east", "city=north", "city=south", "tier=1", "tier=2", "tier=3")
    assert plans.load(TorchPlan, json.loads(json.dumps(plans.dump(plan)))) == plan
    _encoded_once(spark, plan)


@pytest.mark.parametrize(
    ("name", "text", "options"),
    [
        # pandas and Excel double a quote inside a quoted value; Spark's CSV escape is a backslash
        ("quotes.csv", 'distance,city,fare\n1.0,"a ""b""",1.0\n2.0,plain,2.0\n3.0,"c,d",3.0\n', {}),
        # JSON booleans and objects in a text column: Spark writes them as true and {"k":1}
        ("mixed.json", '{"distance":1,"city":true,"fare":1}\n{"distance":2,"city":"x","fare":1}\n'
         '{"distance":3,"city":{"k":1},"fare":1}\n{"distance":4,"city":false,"fare":1}\n', {}),
        ("cased.csv", "distance,city,fare\n1.0,tRuE,1.0\n2.0,false,2.0\n3.0,TRUE,3.0\n", {}),
        ("nulls.csv", "distance,city,fare\n1.0,,1.0\n2.0,a,2.0\n3.0,NA,3.0\n", {"nullValue": "NA"}),
    ],
)  # fmt: skip
def test_where_the_drivers_reader_differs_from_sparks_the_rows_still_find_their_column(
    spark: Any, tmp_path: Path, name: str, text: str, options: dict[str, str]
) -> None:
    (tmp_path / name).write_text(text)
    body = _body(name, features=["distance", "city"], categorical=["city"], options=options)
    _encoded_once(spark, _plan(spark, tmp_path, body))


def test_local_parquet_categories_of_each_type(spark: Any, tmp_path: Path) -> None:
    frame = pd.DataFrame({"distance": [1.0, 2.0, 3.0], "city": ["b", "a", "b"], "tier": [3, 1, 3],
                          "member": [True, False, True], "fare": [1.0, 2.0, 3.0]})  # fmt: skip
    frame.to_parquet(tmp_path / "f.parquet")
    body = _body("f.parquet", features=["distance", "city", "tier", "member"], categorical=["city", "tier", "member"])
    assert "the categories of city, tier, member" in _in_request(spark, tmp_path, body)
    plan = _plan(spark, tmp_path, body)
    assert plan.categorical is not None
    assert plan.categorical["levels"] == {"city": ["a", "b"], "tier": ["1", "3"], "member": ["false", "true"]}
    assert plan.input_shape == (7,)


def test_a_column_of_identifiers_or_of_nulls_is_a_422_naming_it(spark: Any, tmp_path: Path) -> None:
    frame = pd.DataFrame({"distance": range(1200), "city": [f"c{i}" for i in range(1200)], "tier": [None] * 1200,
                          "fare": range(1200)})  # fmt: skip
    frame.to_csv(tmp_path / "ids.csv", index=False)
    for plan in (_plan, _in_request):  # the driver's reading and Spark's
        with pytest.raises(ValidationFailed) as error:
            plan(spark, tmp_path, _body("ids.csv", features=["distance", "city"], categorical=["city"]))
        assert error.value.problem()["errors"][0]["loc"] == "dataset.categorical[0]"
        assert "'city' has more than 1000 distinct values" in error.value.detail
    frame.assign(city="a", tier="").to_csv(tmp_path / "nulls.csv", index=False)
    with pytest.raises(ValidationFailed) as error:
        _plan(spark, tmp_path, _body("nulls.csv", features=["distance", "city", "tier"]))
    assert error.value.problem()["errors"][0]["loc"] in ("dataset.categorical[1]", "dataset.features")
