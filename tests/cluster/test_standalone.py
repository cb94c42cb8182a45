"""The slow suite on a real standalone cluster: torch gradient sharing on two executors, xgboost, evaluation and
batch prediction, with the driver in its own process and artifacts travelling through the storage URI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pandas as pd
import pytest

from tests.cluster.conftest import REPO, cluster_driver, finish
from tests.helpers import TAXI_FEATURES

pytestmark = pytest.mark.slow

CNN = {
    "input_shape": [1, 8, 8],
    "layers": [
        {"type": "conv2d", "filters": 8, "kernel_size": 3, "padding": 1, "activation": "relu"},
        {"type": "flatten"},
        {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"},
    ],
}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("driver")


@pytest.fixture(scope="module")
def driver(standalone_master: str, work: Path, executor_python: str) -> Iterator[httpx.Client]:
    with cluster_driver(standalone_master, work, executor_python) as client:
        yield client


def test_cluster_lists_the_workers_executors(driver: httpx.Client) -> None:
    info = driver.get("/cluster").json()
    assert info["master"].startswith("spark://127.0.0.1:")
    executors = [e for e in info["executors"] if e["id"] != "driver"]
    assert len(executors) == 2 and all(e["cores"] == 1 for e in executors)
    assert info["task_slots"] == 2


def test_torch_gradient_sharing_then_evaluate_and_batch_predict(driver: httpx.Client, work: Path) -> None:
    body = {
        "name": "cluster-cnn",
        "framework": "torch",
        "dataset": {"uri": "digits/train.parquet", "features": ["pixels"], "label": "label",
                    "task": "classification", "num_classes": 10},
        "validation": {"uri": "digits/test.parquet"},
        "network": CNN,
        "training": {"epochs": 3, "batch_size_per_worker": 32, "num_workers": 2, "seed": 7,
                     "optimizer": {"type": "adam", "learning_rate": 0.003}, "mode": "gradient_sharing"},
    }  # fmt: skip
    job = finish(driver, "/train", body)
    assert job["status"] == "SUCCEEDED", job["error"]
    assert job["result"]["validation"]["accuracy"] > 0.85
    lines = [line["message"] for line in driver.get(f"/jobs/{job['id']}/logs").json()["lines"]]
    shipped = [line for line in lines if "executor environment matches the driver on 2 executors" in line]
    assert shipped and "sparktrain-executor.zip/workers" in shipped[0], lines
    # the codec's C loops were built on the executors from the source in that zip (workers/codecs/native.py)
    assert [w["codec"] for w in job["result"]["per_worker"]] == ["c", "c"]
    version = driver.get("/models/cluster-cnn/versions/1").json()
    assert version["artifact_uri"].startswith("file://") and "/store/" in version["artifact_uri"]

    evaluated = finish(driver, "/evaluate", {"model": {"name": "cluster-cnn"},
                                              "dataset": {"uri": "digits/test.parquet"}})  # fmt: skip
    assert evaluated["status"] == "SUCCEEDED", evaluated["error"]
    accuracy = evaluated["result"]["classification"]["accuracy"]
    assert accuracy == pytest.approx(job["result"]["validation"]["accuracy"], abs=1e-9)

    digits = pd.read_parquet(REPO / "datasets/digits/test.parquet")
    digits.assign(id=range(len(digits))).to_parquet(work / "data" / "digits-keyed.parquet")
    predicted = finish(
        driver,
        "/predict",
        {"model": {"name": "cluster-cnn"}, "dataset": {"uri": "digits-keyed.parquet", "key": "id"},
         "output_uri": str(work / "data" / "digits-predicted")},
    )  # fmt: skip
    assert predicted["status"] == "SUCCEEDED", predicted["error"]
    assert predicted["result"]["rows"] == len(digits)
    written = pd.read_parquet(work / "data" / "digits-predicted").sort_values("id")
    rows = [[float(v) for v in pixels] for pixels in digits["pixels"].head(10)]
    online = driver.post("/predict", json={"model": {"name": "cluster-cnn"}, "instances": rows})
    assert online.status_code == 200, online.text
    assert written["label"].head(10).tolist() == online.json()["predictions"]


def test_xgboost_on_two_executors(driver: httpx.Client) -> None:
    body = {
        "name": "cluster-xgb",
        "framework": "xgboost",
        "dataset": {"uri": "taxi/train.parquet", "features": TAXI_FEATURES, "label": "fare_amount",
                    "task": "regression"},
        "validation": {"uri": "taxi/eval.parquet"},
        "params": {"max_depth": 6, "learning_rate": 0.1, "num_round": 40, "num_workers": 2},
    }  # fmt: skip
    job = finish(driver, "/train", body)
    assert job["status"] == "SUCCEEDED", job["error"]
    assert job["result"]["num_workers"] == 2 and job["result"]["validation"]["rmse"] < 3.0
    evaluated = finish(driver, "/evaluate", {"model": {"name": "cluster-xgb"}, "dataset": {"uri": "taxi/eval.parquet"},
                                             "metrics": ["regression"]})  # fmt: skip
    assert evaluated["status"] == "SUCCEEDED", evaluated["error"]
    assert evaluated["result"]["regression"]["rmse"] == pytest.approx(job["result"]["validation"]["rmse"], rel=1e-4)
