"""Inline prediction and V2 inference over real HTTP, with models the service trained (xgboost and Spark ML on the
taxi data): a string or a boolean where the model takes a number, a null and a misspelt column are 422s that name the
row and the column; a V2 body off the protocol's schema lists each field, and malformed JSON is /train's 400."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.helpers import TAXI_FEATURES, Service, running_service, small_xgboost, taxi_request

REPO = Path(__file__).resolve().parents[3]
XGBOOST, SPARK_ML = "taxi-fare-xgboost", "taxi-fare-lr"


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(spark, tmp_path_factory.mktemp("svc")) as service:
        yield service


@pytest.fixture(scope="module")
def models(svc: Service) -> list[str]:
    xgboost = {**small_xgboost(XGBOOST), "params": {"num_round": 10, "max_depth": 3, "num_workers": 1}}
    svc.done("/train", xgboost)
    svc.done("/train", taxi_request(SPARK_ML))
    return [XGBOOST, SPARK_ML]


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    taxi = pd.read_parquet(REPO / "datasets/taxi/eval.parquet")[TAXI_FEATURES].head(2)
    return [{k: v.item() if hasattr(v, "item") else v for k, v in row.items()} for row in taxi.to_dict("records")]


def _problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = dict(response.json())
    assert body["status"] == status and body["detail"]
    return body


def _predict(svc: Service, model: str, **body: Any) -> Any:
    return svc.client.post("/predict", json={"model": {"name": model}, **body})


def _split(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"columns": TAXI_FEATURES, "data": [[row[f] for f in TAXI_FEATURES] for row in rows]}


@pytest.mark.parametrize(
    ("column", "value", "takes"),
    [("h_distance", "2.7", "numbers"), ("hour", "9", "whole numbers"), ("h_distance", True, "numbers"),
     ("is_weekend", False, "whole numbers"), ("trip_distance", "abc", "numbers")],
)  # fmt: skip
def test_a_string_or_a_boolean_for_a_number_is_a_422_naming_row_and_column(
    svc: Service, models: list[str], rows: list[dict[str, Any]], column: str, value: Any, takes: str
) -> None:
    bad = [rows[0], {**rows[1], column: value}]
    for model in models:
        answered = _predict(svc, model, dataframe_records=rows)
        assert answered.status_code == 200, answered.text
        for body, loc in (({"dataframe_records": bad}, "dataframe_records[1]"),
                          ({"dataframe_split": _split(bad)}, "dataframe_split.data[1]")):  # fmt: skip
            problem = _problem(_predict(svc, model, **body), 422)
            assert problem["errors"][0]["loc"] == loc, problem  # the field the row is in (it said rows[1])
            assert problem["errors"][0]["in"] == "body" and problem["errors"][0]["type"] == "value_error", problem
            assert f"column {column!r} takes {takes}: {json.dumps(value)} is not a number" in problem["detail"], problem
            assert "the model expects" in problem["detail"]


def test_a_null_names_its_column(svc: Service, models: list[str], rows: list[dict[str, Any]]) -> None:
    for model in models:
        problem = _problem(_predict(svc, model, dataframe_records=[rows[0], {**rows[1], "h_distance": None}]), 422)
        assert problem["detail"].startswith("dataframe_records[1]: column 'h_distance' is null: a feature is NaN"), (
            problem
        )


def test_a_misspelt_column_is_named_both_ways(svc: Service, models: list[str], rows: list[dict[str, Any]]) -> None:
    misspelt = {("h_dist" if k == "h_distance" else k): v for k, v in rows[0].items()}
    for model in models:
        problem = _problem(_predict(svc, model, dataframe_records=[misspelt]), 422)
        assert "missing features ['h_distance']; unexpected features ['h_dist']; the model expects" in problem["detail"]


# --- V2 -------------------------------------------------------------------------------------------------------


def _infer(svc: Service, content: bytes, path: str = f"/v2/models/{XGBOOST}/infer", **headers: str) -> Any:
    return svc.client.post(path, content=content, headers={"content-type": "application/json", **headers})


def _tensor(rows: list[dict[str, Any]]) -> dict[str, Any]:
    data = [row[f] for row in rows for f in TAXI_FEATURES]
    return {"name": "input", "shape": [len(rows), len(TAXI_FEATURES)], "datatype": "FP32", "data": data}


def _per_feature(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": f, "shape": [len(rows)], "datatype": "FP64", "data": [row[f] for row in rows]}
            for f in TAXI_FEATURES]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "loc", "msg"),
    [
        ({"inputs": [{"name": "input", "shape": [1, 11], "data": [0.0] * 11}]}, "inputs[0].datatype", "Field required"),
        ({"input": []}, "inputs", "Field required"),
        ({"inputs": []}, "inputs", "List should have at least 1 item"),
        (
            {"inputs": [{"name": "input", "shape": ["a"], "datatype": "FP32"}]},
            "inputs[0].shape[0]",
            "Input should be a valid integer",
        ),
        ([], "body", "Input should be an object"),
    ],
    ids=["no-datatype", "input-not-inputs", "no-inputs", "shape-of-text", "not-an-object"],
)
def test_v2_schema_errors_name_the_field(svc: Service, body: Any, loc: str, msg: str) -> None:
    for path in (f"/v2/models/{XGBOOST}/infer", f"/v2/models/{XGBOOST}/versions/1/infer"):
        problem = _problem(_infer(svc, json.dumps(body).encode(), path), 422)
        assert problem["type"].endswith("/validation") and problem["error"] == problem["detail"]
        assert problem["errors"][0]["loc"] == loc and msg in problem["errors"][0]["msg"], problem
        assert problem["detail"].startswith(f"{loc}: {msg}"), problem
        assert "1 validation error" not in problem["detail"]


def test_v2_malformed_json_is_the_400_train_gives(svc: Service) -> None:
    headers = {"content-type": "application/json"}
    train = _problem(svc.client.post("/train", content=b"{not json", headers=headers), 400)
    assert train["type"].endswith("/malformed-json")
    same = ("type", "title", "status")
    binary = {"inference-header-content-length": "9"}  # the JSON head of a binary-tensor request
    for content, extra in ((b"{not json", {}), (b"{not json" + b"\x00" * 8, binary)):
        problem = _problem(_infer(svc, content, **extra), 400)
        assert {k: problem[k] for k in same} == {k: train[k] for k in same}
        assert problem["detail"].startswith("The body is not valid JSON") and problem["error"] == problem["detail"]


def test_v2_values_that_are_not_numbers_name_row_and_column(
    svc: Service, models: list[str], rows: list[dict[str, Any]]
) -> None:
    predicted = _predict(svc, XGBOOST, dataframe_records=rows).json()["predictions"]
    for inputs in ([_tensor(rows)], _per_feature(rows)):
        answer = _infer(svc, json.dumps({"inputs": inputs}).encode())
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"][0]["data"] == pytest.approx(predicted, rel=1e-6)

    bad = [rows[0], {**rows[1], "h_distance": "2.7"}]
    problem = _problem(_infer(svc, json.dumps({"inputs": [_tensor(bad)]}).encode()), 422)
    assert problem["errors"][0]["loc"] == "inputs.input.data"
    assert "row 1, column 'h_distance': \"2.7\" is not a number" in problem["detail"], problem
    bad = [rows[0], {**rows[1], "hour": True}]
    problem = _problem(_infer(svc, json.dumps({"inputs": _per_feature(bad)}).encode()), 422)
    assert problem["errors"][0]["loc"] == "inputs.hour.data"
    assert "row 1, column 'hour': true is not a number" in problem["detail"], problem
    bad = [rows[0], {**rows[1], "h_distance": None}]
    problem = _problem(_infer(svc, json.dumps({"inputs": [_tensor(bad)]}).encode()), 422)
    assert "row 1, column 'h_distance' is NaN: a value is NaN, infinite, missing" in problem["detail"], problem
    misspelt = [{**t, "name": "h_dist"} if t["name"] == "h_distance" else t for t in _per_feature(rows)]
    problem = _problem(_infer(svc, json.dumps({"inputs": misspelt}).encode()), 422)
    assert "missing inputs ['h_distance']; unexpected inputs ['h_dist']" in problem["detail"], problem


def test_v2_metadata_advertises_the_single_tensor_the_docs_describe(svc: Service, models: list[str]) -> None:
    metadata = svc.client.get(f"/v2/models/{XGBOOST}").json()
    assert metadata["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, len(TAXI_FEATURES)],
                                   "parameters": {"features": TAXI_FEATURES}}]  # fmt: skip
    # the metadata's shape sent back as it is: "[-1, 11] does not hold its 22 values" (bad-input walkthrough)
    data = [0.5] * (2 * len(TAXI_FEATURES))
    tensor = {"name": "input", "datatype": "FP32", "shape": metadata["inputs"][0]["shape"], "data": data}
    problem = _problem(_infer(svc, json.dumps({"inputs": [tensor]}).encode()), 422)
    assert f"give the data's own shape (here [2, {len(TAXI_FEATURES)}])" in problem["detail"], problem


def test_a_column_named_twice_a_key_the_predictions_take_and_a_top_k_of_0_are_422s(
    svc: Service, models: list[str], rows: list[dict[str, Any]]
) -> None:
    """Each was taken: the last value of a column named twice won without a word; a key named ``prediction`` or
    ``features`` and a ``top_k`` of 0 failed the job with Spark's or Python's own error (inference walkthrough)."""
    split = _split(rows)
    twice = {"columns": [*split["columns"], "hour"], "data": [[*row, 3] for row in split["data"]]}
    problem = _problem(_predict(svc, XGBOOST, dataframe_split=twice), 422)
    assert problem["errors"][0]["loc"] == "dataframe_split.columns" and "'hour' named more than once" in problem[
        "detail"], problem  # fmt: skip
    for model, key in ((XGBOOST, "prediction"), (SPARK_ML, "Features")):  # (a regression writes no label)
        body = {"model": {"name": model}, "dataset": {"uri": "datasets/taxi/eval.parquet", "key": key}}
        problem = _problem(svc.client.post("/predict", json=body), 422)
        assert problem["errors"][0]["loc"] == "dataset.key" and "key the rows by another column" in problem["detail"]
    # a misspelt key lists the columns, as a misspelt feature does (walkthrough: it named none)
    body = {"model": {"name": XGBOOST}, "dataset": {"uri": "datasets/taxi/eval.parquet", "key": "hours"}}
    problem = _problem(svc.client.post("/predict", json=body), 422)
    assert problem["errors"][0]["loc"] == "dataset.key", problem
    assert "no column 'hours' in datasets/taxi/eval.parquet; columns: passenger_count (" in problem["detail"], problem
    body = {"model": {"name": XGBOOST}, "dataset": {"uri": "datasets/taxi/eval.parquet"}, "top_k": [0]}
    assert _problem(svc.client.post("/evaluate", json=body), 422)["errors"][0]["loc"] == "top_k[0]", body


def test_rows_without_a_key_are_bad_rows(svc: Service, models: list[str]) -> None:
    """They failed the job even with bad_rows skip, and the failure did not say how to go on."""
    frame = pd.read_parquet(REPO / "datasets/taxi/eval.parquet").head(20).assign(trip=range(20)).astype({"trip": float})
    frame.loc[[3, 7], "trip"] = None
    root = svc.app.state.runtime.settings.data_roots[-1]
    root.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(root / "keyless.parquet")
    body = {"model": {"name": XGBOOST}, "dataset": {"uri": "keyless.parquet", "key": "trip"}}
    response = svc.client.post("/predict", json=body)
    failed = svc.wait(response.json()["id"], {"SUCCEEDED", "FAILED"}, timeout=600)
    assert failed["status"] == "FAILED" and 'set dataset.bad_rows to "skip"' in failed["error"]["message"], failed[
        "error"
    ]
    skipped = svc.done("/predict", {**body, "dataset": {**body["dataset"], "bad_rows": "skip"}})
    assert skipped["result"]["rows"] == 18 and skipped["result"]["bad_rows"] == 2, skipped["result"]
    frame.assign(trip=None).astype({"trip": float}).to_parquet(root / "no-keys.parquet")  # nothing left: it fails
    body = {"model": {"name": XGBOOST}, "dataset": {"uri": "no-keys.parquet", "key": "trip", "bad_rows": "skip"}}
    empty = svc.wait(svc.client.post("/predict", json=body).json()["id"], {"SUCCEEDED", "FAILED"}, timeout=600)
    assert empty["status"] == "FAILED" and "every row of" in empty["error"]["message"], empty


def test_v2_nested_data_is_read_row_major(svc: Service, models: list[str], rows: list[dict[str, Any]]) -> None:
    """Nested lists were a 500 for a while (a check's raise had slipped out of its branch)."""
    tensor = _tensor(rows)
    nested = {**tensor, "data": [[row[f] for f in TAXI_FEATURES] for row in rows]}
    flat = _infer(svc, json.dumps({"inputs": [tensor]}).encode())
    answer = _infer(svc, json.dumps({"inputs": [nested]}).encode())
    assert answer.status_code == 200 and answer.json()["outputs"] == flat.json()["outputs"], answer.text


def test_near_misses_say_what_was_meant(svc: Service, models: list[str], rows: list[dict[str, Any]]) -> None:
    """One row not wrapped in a list, a lower-case V2 datatype, binary tensors sent without their header: each said
    what was wrong but not what to write (inference walkthrough)."""
    flat = [rows[0][f] for f in TAXI_FEATURES]
    problem = _problem(_predict(svc, XGBOOST, instances=flat), 422)
    assert "a row is a list of values: wrap it, [[...]]" in problem["detail"], problem
    tensor = {"name": "input", "shape": [1, len(flat)], "datatype": "fp32", "data": flat}
    problem = _problem(_infer(svc, json.dumps({"inputs": [tensor]}).encode()), 422)
    assert "fp32 is not a numeric tensor (datatypes are upper case: FP32)" in problem["detail"], problem
    head = json.dumps({"inputs": [{**tensor, "datatype": "FP32", "data": None,
                                   "parameters": {"binary_data_size": 4 * len(flat)}}]}).encode()  # fmt: skip
    problem = _problem(_infer(svc, head + b"\x00" * 4 * len(flat)), 400)
    assert "needs the Inference-Header-Content-Length header" in problem["detail"], problem
