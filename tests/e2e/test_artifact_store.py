"""Models and checkpoints published to an S3-compatible store (moto's server) and served from it: online and
batch prediction, evaluation, archive download and resume all read the store, not the driver's disk."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.helpers import Service, taxi_request

REPO = Path(__file__).resolve().parents[2]
MLP = {"layers": [{"type": "dense", "units": 16, "activation": "relu"},
                  {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}]}  # fmt: skip


@pytest.fixture
def svc(make_service: Callable[..., Any], s3_bucket: str) -> Iterator[Service]:
    with make_service(artifact_store=f"s3://{s3_bucket}/store") as service:
        yield service


def _digits(epochs: int, **training: Any) -> dict[str, Any]:
    return {
        "name": "stored",
        "framework": "torch",
        "dataset": {"uri": "datasets/digits/train.parquet", "features": ["pixels"], "label": "label",
                    "task": "classification", "num_classes": 10},
        "validation": {"uri": "datasets/digits/test.parquet"},
        "network": MLP,
        "training": {"epochs": epochs, "batch_size_per_worker": 32, "num_workers": 2, **training},
    }  # fmt: skip


def test_models_and_checkpoints_live_in_the_store(svc: Service, s3_bucket: str) -> None:
    job = svc.wait(svc.train(_digits(2))["id"], {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED", job["error"]
    version = svc.client.get("/models/stored/versions/1").json()
    assert version["artifact_uri"] == f"s3://{s3_bucket}/store/jobs/{job['id']}/model"
    checkpoints = svc.client.get(f"/jobs/{job['id']}/checkpoints").json()["checkpoints"]
    assert [c["uri"] for c in checkpoints] == [
        f"s3://{s3_bucket}/store/jobs/{job['id']}/checkpoints/epoch-{e}" for e in (1, 2)
    ]
    listed = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).list_objects_v2(Bucket=s3_bucket)
    keys = {o["Key"] for o in listed["Contents"]}
    assert f"store/jobs/{job['id']}/model/weights.safetensors" in keys
    assert f"store/jobs/{job['id']}/checkpoints/epoch-2/rank-1.safetensors" in keys

    online = svc.client.post("/predict", json={"model": {"name": "stored"}, "instances": [[0.0] * 64]})
    assert online.status_code == 200, online.text
    archive = svc.client.get("/models/stored/versions/1/artifact")
    with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
        assert "stored-v1/weights.safetensors" in tar.getnames()
    evaluation = svc.wait(
        svc.client.post("/evaluate", json={"model": {"checkpoint": checkpoints[0]["id"]},
                                           "dataset": {"uri": "datasets/digits/test.parquet"}}).json()["id"],
        {"SUCCEEDED", "FAILED"},
    )  # fmt: skip
    assert evaluation["status"] == "SUCCEEDED", evaluation["error"]

    resumed = svc.wait(svc.train(_digits(3, resume_from=checkpoints[-1]["id"]))["id"], {"SUCCEEDED", "FAILED"})
    assert resumed["status"] == "SUCCEEDED", resumed["error"]
    assert resumed["result"]["steps_per_worker"] == job["result"]["steps_per_worker"] // 2


def test_spark_ml_models_are_published_too(svc: Service, s3_bucket: str) -> None:
    job = svc.wait(svc.train(taxi_request("stored-lr"))["id"], {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED", job["error"]
    uri = svc.client.get("/models/stored-lr/versions/1").json()["artifact_uri"]
    assert uri.startswith(f"s3://{s3_bucket}/store/jobs/")
    row = {"passenger_count": 1, "trip_distance": 2.0, "pickup_longitude": -73.98, "pickup_latitude": 40.75,
           "rate_code": 1, "dropoff_longitude": -73.96, "dropoff_latitude": 40.77, "hour": 9, "day_of_week": 2,
           "is_weekend": 0, "h_distance": 2.7}  # fmt: skip
    online = svc.client.post("/predict", json={"model": {"name": "stored-lr"}, "dataframe_records": [row]})
    assert online.status_code == 200 and online.json()["predictions"][0] > 0
