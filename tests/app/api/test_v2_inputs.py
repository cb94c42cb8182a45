"""V2 inputs that were answered wrong, over real HTTP with a model the service trained (xgboost, a fare from
``trip_distance``, a boolean ``weekend`` and ``h_distance``): a lone tensor named after a feature is the per-feature
form and needs the others; per-feature tensors are one value per row, all the same rows; a boolean feature takes 0
and 1 only, as ``/predict`` says; binary data is all claimed, and a BOOL byte is 0 or 1; a model whose first version
is still training answers readiness 409, as ``/predict`` does."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.helpers import Service, problem, running_service

REPO = Path(__file__).resolve().parents[3]
MODEL = "v2-weekend"
FEATURES = ["trip_distance", "weekend", "h_distance"]
INFER = f"/v2/models/{MODEL}/infer"


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data = tmp_path_factory.mktemp("data")
    taxi = pd.read_parquet(REPO / "datasets/taxi/train.parquet").head(2000)
    taxi.assign(weekend=taxi["is_weekend"].astype(bool)).to_parquet(data / "weekend.parquet")
    with running_service(spark, tmp_path_factory.mktemp("v2"), data_roots=[data]) as service:
        service.done("/train", {
            "name": MODEL,
            "framework": "xgboost",
            "dataset": {"uri": str(data / "weekend.parquet"), "features": FEATURES, "label": "fare_amount",
                        "task": "regression"},
            "params": {"num_round": 3, "max_depth": 3, "num_workers": 1},
        })  # fmt: skip
        yield service


def _feature(name: str, data: list[Any], datatype: str = "FP64", shape: list[int] | None = None) -> dict[str, Any]:
    return {"name": name, "shape": shape or [len(data)], "datatype": datatype, "data": data}


def _refused(svc: Service, body: dict[str, Any], loc: str) -> str:
    refused = problem(svc.client.post(INFER, json=body), 422)
    assert refused["errors"][0]["loc"] == loc and refused["error"] == refused["detail"], refused
    return str(refused["detail"])


def test_a_lone_feature_tensor_is_not_read_as_whole_rows(svc: Service) -> None:
    """``trip_distance`` [3] (three rows of one feature) was one row of the three features: 200, one prediction."""
    detail = _refused(svc, {"inputs": [_feature("trip_distance", [2.1, 9.5, 1.0])]}, "inputs")
    assert "missing inputs ['weekend', 'h_distance']; the model expects trip_distance: double, weekend: boolean" \
        in detail, detail  # fmt: skip
    rows = [[2.1, True, 2.7], [9.5, False, 9.9]]
    per_feature = [_feature("trip_distance", [2.1, 9.5]), _feature("weekend", [True, False], "BOOL"),
                   _feature("h_distance", [2.7, 9.9], shape=[2, 1])]  # fmt: skip
    answered = svc.client.post(INFER, json={"inputs": per_feature})
    assert answered.status_code == 200, answered.text
    online = svc.client.post("/predict", json={"model": {"name": MODEL}, "instances": rows}).json()
    assert answered.json()["outputs"][0]["data"] == pytest.approx(online["predictions"], rel=1e-6)
    shifted = [_feature("trip_distance", [2.1, 9.5, 1.0, 2.0], shape=[2, 2]), _feature("weekend", [], shape=[2, 0]),
               _feature("h_distance", [2.7, 9.9])]  # fmt: skip
    detail = _refused(svc, {"inputs": shifted}, "inputs.trip_distance.shape")
    assert "[2, 2]: a feature's tensor is [rows] or [rows, 1], one value per row" in detail, detail


def test_a_boolean_feature_takes_booleans_as_predict_says(svc: Service) -> None:
    predict = problem(svc.client.post("/predict", json={"model": {"name": MODEL}, "instances": [[2.1, -7, 9]]}), 422)
    assert "column 'weekend' takes booleans: -7 is not a boolean" in predict["detail"], predict
    detail = _refused(svc, {"inputs": [_feature("input", [2.1, -7, 9], shape=[1, 3])]}, "inputs")
    assert "row 0, column 'weekend' takes booleans: -7 is not a boolean; the model expects weekend: boolean" in detail
    per_feature = [_feature("trip_distance", [2.1]), _feature("weekend", [2.5]), _feature("h_distance", [2.7])]
    detail = _refused(svc, {"inputs": per_feature}, "inputs")
    assert "row 0, column 'weekend' takes booleans: 2.5 is not a boolean" in detail, detail


def _binary(svc: Service, tensor: dict[str, Any], data: bytes) -> Any:
    head = json.dumps({"inputs": [tensor]}).encode()
    headers = {"Inference-Header-Content-Length": str(len(head)), "content-type": "application/octet-stream"}
    return svc.client.post(INFER, content=head + data, headers=headers)


def test_binary_data_is_all_claimed_and_bool_bytes_are_0_or_1(svc: Service) -> None:
    values = struct.pack("<3d", 2.1, 1.0, 2.7)
    tensor = {"name": "input", "shape": [1, 3], "datatype": "FP64", "parameters": {"binary_data_size": len(values)}}
    assert _binary(svc, tensor, values).status_code == 200
    extra = problem(_binary(svc, tensor, values + b"\x00" * 8), 422)  # another row the header did not claim
    assert extra["errors"][0]["loc"] == "body" and "8 bytes after the binary tensor data" in extra["detail"], extra
    flags = {"name": "weekend", "shape": [1], "datatype": "BOOL", "parameters": {"binary_data_size": 1}}
    head = json.dumps({"inputs": [_feature("trip_distance", [2.1]), flags, _feature("h_distance", [2.7])]}).encode()
    refused = svc.client.post(
        INFER, content=head + b"\x02", headers={"Inference-Header-Content-Length": str(len(head))}
    )
    assert "binary data: byte 0 is 2; BOOL bytes are 0 (false) or 1 (true)" in problem(refused, 422)["detail"]


def test_readiness_of_a_model_whose_first_version_is_training_is_a_conflict(svc: Service) -> None:
    body = {"name": "v2-not-yet", "framework": "xgboost",
            "dataset": {"uri": str(svc.runtime.settings.data_roots[0] / "weekend.parquet"), "features": FEATURES,
                        "label": "fare_amount", "task": "regression"},
            "params": {"num_round": 5000, "max_depth": 8, "num_workers": 1}}  # fmt: skip
    job = svc.train(body)
    try:
        conflict = problem(svc.client.get("/v2/models/v2-not-yet/ready"), 409)
        assert conflict["job_id"] == job["id"] and conflict["error"] == conflict["detail"], conflict
    finally:
        assert svc.client.post(f"/jobs/{job['id']}/cancel").status_code == 202
        svc.wait(job["id"], {"CANCELLED", "FAILED", "SUCCEEDED"}, timeout=120)
