"""A deliberately mismatched executor: its Python path puts an xgboost 9.9.9 distribution first, so the
executors report a version the driver does not have, and the job fails before training, saying which executor
has which version."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.cluster.conftest import cluster_driver, finish
from tests.helpers import TAXI_FEATURES

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mismatched(
    standalone_master: str, executor_python: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[httpx.Client]:
    work = tmp_path_factory.mktemp("mismatch-driver")
    fake = work / "fake-site"
    dist = fake / "xgboost-9.9.9.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: xgboost\nVersion: 9.9.9\n")
    conf = {"spark.executorEnv.PYTHONPATH": str(fake)}
    with cluster_driver(standalone_master, work, executor_python, SPARK_CONF=json.dumps(conf)) as client:
        yield client


def test_a_mismatched_executor_fails_the_job_with_both_versions(mismatched: httpx.Client) -> None:
    body = {
        "name": "mismatch-xgb",
        "framework": "xgboost",
        "dataset": {"uri": "taxi/train.parquet", "features": TAXI_FEATURES, "label": "fare_amount",
                    "task": "regression"},
        "params": {"num_round": 5, "num_workers": 2},
    }  # fmt: skip
    job = finish(mismatched, "/train", body)
    assert job["status"] == "FAILED"
    assert job["error"]["reason"] == "ENVIRONMENT_MISMATCH", job["error"]
    message = job["error"]["message"]
    assert "has xgboost 9.9.9, the driver 3.2.0" in message and "executor at 127.0.0.1:" in message, message
    assert "Install the same versions" in message
    assert job["model"] is None and job["result"] is None
