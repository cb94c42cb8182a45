"""The V2 Open Inference Protocol where the service once answered off it, over real HTTP with a classifier the service
trained (xgboost, the taxi rate by name: outputs ``predictions``, ``probabilities`` and ``label``): a request's
``outputs`` picks the tensors answered (one the model does not have is a 422 naming it and listing the model's), an
input named twice is refused, a value its tensor's datatype cannot hold is a 422 naming row and column, the ``id``
comes back, and a model version answers readiness."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.helpers import TAXI_FEATURES, Service, problem, running_service

REPO = Path(__file__).resolve().parents[3]
MODEL = "v2-rate"
FEATURES = [f for f in TAXI_FEATURES if f != "rate_code"]
OUTPUTS = ["predictions", "probabilities", "label"]
RATE_NAMES = {1: "standard", 2: "jfk", 3: "newark", 5: "negotiated"}
INFER = f"/v2/models/{MODEL}/infer"


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data = tmp_path_factory.mktemp("data")
    taxi = pd.read_parquet(REPO / "datasets/taxi/train.parquet")
    taxi.assign(rate_name=taxi["rate_code"].map(RATE_NAMES)).to_parquet(data / "rates.parquet")
    with running_service(spark, tmp_path_factory.mktemp("v2"), data_roots=[data]) as service:
        service.done("/train", {
            "name": MODEL,
            "framework": "xgboost",
            "dataset": {"uri": str(data / "rates.parquet"), "features": FEATURES, "label": "rate_name",
                        "task": "classification"},
            "params": {"num_round": 5, "max_depth": 3, "num_workers": 1},
        })  # fmt: skip
        yield service


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    taxi = pd.read_parquet(REPO / "datasets/taxi/eval.parquet")[FEATURES].head(3)
    return list(json.loads(taxi.to_json(orient="records", double_precision=15)))


def _tensor(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": "input", "shape": [len(rows), len(FEATURES)], "datatype": "FP32",
            "data": [row[f] for row in rows for f in FEATURES]}  # fmt: skip


def _per_feature(rows: list[dict[str, Any]], **datatypes: str) -> list[dict[str, Any]]:
    return [{"name": f, "shape": [len(rows)], "datatype": datatypes.get(f, "FP64"), "data": [row[f] for row in rows]}
            for f in FEATURES]  # fmt: skip


def _refused(svc: Service, body: dict[str, Any], loc: str) -> str:
    """The 422 of a request off the protocol: located at ``loc``, with the protocol's ``error`` member."""
    refused = problem(svc.client.post(INFER, json=body), 422)
    assert refused["errors"][0]["loc"] == loc and refused["error"] == refused["detail"], refused
    return str(refused["detail"])


def test_requested_outputs_are_the_ones_answered_in_the_order_asked(svc: Service, rows: list[dict[str, Any]]) -> None:
    everything = svc.client.post(INFER, json={"inputs": [_tensor(rows)]}).json()
    assert [o["name"] for o in everything["outputs"]] == OUTPUTS and everything.get("id") is None
    assert [o["name"] for o in svc.client.get(f"/v2/models/{MODEL}").json()["outputs"]] == OUTPUTS
    for requested in (["label"], ["probabilities", "predictions"], ["label", "probabilities", "predictions"]):
        body = {"id": "req-42", "parameters": {"trace": True}, "inputs": [_tensor(rows)],
                "outputs": [{"name": n, "parameters": {"binary_data": False}} for n in requested]}  # fmt: skip
        for path in (INFER, f"/v2/models/{MODEL}/versions/1/infer"):
            answer = svc.client.post(path, json=body)
            assert answer.status_code == 200, answer.text
            answered = answer.json()
            assert answered["id"] == "req-42" and answered["model_version"] == "1"
            assert [o["name"] for o in answered["outputs"]] == requested, answered
            for output in answered["outputs"]:  # the same tensors as when every output is answered
                assert output == next(o for o in everything["outputs"] if o["name"] == output["name"])
    answer = svc.client.post(INFER, json={"inputs": [_tensor(rows)], "outputs": []})  # none asked: all of them
    assert [o["name"] for o in answer.json()["outputs"]] == OUTPUTS


def test_an_output_the_model_does_not_have_is_a_422_naming_it_and_the_models(
    svc: Service, rows: list[dict[str, Any]]
) -> None:
    tensors = [_tensor(rows)]
    detail = _refused(svc, {"inputs": tensors, "outputs": [{"name": "predictions"}, {"name": "score"}]},
                      "outputs[1].name")  # fmt: skip
    assert f"unknown output 'score'; the model's outputs are {OUTPUTS}" in detail, detail
    detail = _refused(svc, {"inputs": tensors, "outputs": [{"name": "Label"}]}, "outputs[0].name")  # case-sensitive
    assert "unknown output 'Label'" in detail, detail
    detail = _refused(svc, {"inputs": tensors, "outputs": [{"parameters": {}}]}, "outputs[0].name")
    assert f"one of {OUTPUTS}" in detail, detail
    detail = _refused(svc, {"inputs": tensors, "outputs": [{"name": "label"}, {"name": "label"}]}, "outputs[1].name")
    assert "'label' is requested twice" in detail, detail


def test_input_names_each_name_one_of_the_models_inputs_once(svc: Service, rows: list[dict[str, Any]]) -> None:
    tensors = _per_feature(rows)
    assert svc.client.post(INFER, json={"inputs": tensors}).status_code == 200
    twice = [*tensors, {**tensors[1], "data": [0.0] * len(rows)}]  # the second copy was taken, the first dropped
    detail = _refused(svc, {"inputs": twice}, f"inputs[{len(tensors)}].name")
    assert f"{FEATURES[1]!r} names two inputs" in detail, detail
    tip = {"name": "tip", "shape": [len(rows)], "datatype": "FP64", "data": [1.0] * len(rows)}
    detail = _refused(svc, {"inputs": [*tensors, tip]}, "inputs")
    assert "unexpected inputs ['tip']; the model expects passenger_count: " in detail, detail
    detail = _refused(svc, {"inputs": tensors[1:]}, "inputs")
    assert f"missing inputs [{FEATURES[0]!r}]" in detail, detail


_FITS: dict[str, Callable[[Any], Any]] = {"BOOL": bool, "INT64": round}
"""The values a tensor of that datatype takes: is_weekend as booleans, a double column (h_distance) rounded."""


@pytest.mark.parametrize(
    ("feature", "datatype", "value", "says"),
    [("h_distance", "INT64", 1.5, "1.5 is not a whole number: INT64 values are whole, in range [-9223372036"),
     ("hour", "UINT8", 300, "300 is beyond UINT8's range [0, 255]"),
     ("day_of_week", "INT8", -129, "-129 is beyond INT8's range [-128, 127]"),
     ("trip_distance", "FP16", 1e5, "100000 is beyond FP16's range [-65504, 65504]"),
     ("is_weekend", "BOOL", 1, "1 is not a boolean (true or false) in a BOOL tensor")],
)  # fmt: skip
def test_a_value_its_datatype_cannot_hold_is_a_422_naming_row_and_column(
    svc: Service, rows: list[dict[str, Any]], feature: str, datatype: str, value: Any, says: str
) -> None:
    fit = _FITS.get(datatype)
    fitting = [{**row, feature: fit(row[feature])} for row in rows] if fit else rows
    tensors = _per_feature(fitting, **{feature: datatype})
    assert svc.client.post(INFER, json={"inputs": tensors}).status_code == 200  # whole, in range, true/false: taken
    bad = [fitting[0], {**fitting[1], feature: value}, fitting[2]]
    detail = _refused(svc, {"inputs": _per_feature(bad, **{feature: datatype})}, f"inputs.{feature}.data")
    assert f"row 1, column {feature!r}: {says}" in detail, detail


def test_a_shape_that_does_not_hold_the_data_is_a_422(svc: Service, rows: list[dict[str, Any]]) -> None:
    tensor = _tensor(rows)
    detail = _refused(svc, {"inputs": [{**tensor, "data": tensor["data"][:-1]}]}, "inputs.input.shape")
    assert f"{tensor['shape']} does not hold its {len(tensor['data']) - 1} values" in detail, detail
    nested = {**tensor, "data": [[row[f] for f in FEATURES] for row in rows]}  # the natural form is row-major too
    assert svc.client.post(INFER, json={"inputs": [nested]}).status_code == 200


def test_a_model_version_answers_readiness(svc: Service) -> None:
    for path in (f"/v2/models/{MODEL}/ready", f"/v2/models/{MODEL}/versions/1/ready"):
        ready = svc.client.get(path)
        assert (ready.status_code, ready.content) == (200, b""), path
    for path in (f"/v2/models/{MODEL}/versions/2/ready", "/v2/models/no-such-model/versions/1/ready"):
        missing = problem(svc.client.get(path), 404)
        assert missing["error"] == missing["detail"]
    assert problem(svc.client.get(f"/v2/models/{MODEL}/versions/one/ready"), 422)["errors"][0]["loc"] == "version"
    wrong = problem(svc.client.post("/v2", json={}), 405)  # the server's own path too (it lacked the member)
    assert wrong["error"] == wrong["detail"]


def test_a_tensor_is_rows_of_the_models_features(svc: Service, rows: list[dict[str, Any]]) -> None:
    """[1, 20] holding two rows of 10 features was read as two rows without a word (walkthrough leftover): the
    dimensions after the first are one row. [10] alone is one row."""
    width = len(FEATURES)
    two = _tensor(rows[:2])
    detail = _refused(svc, {"inputs": [{**two, "shape": [1, 2 * width]}]}, "inputs[0].shape")
    assert f"[1, {2 * width}] is not rows of the model's {width} features: send the shape [rows, {width}] " \
        f"(here [2, {width}])" in detail, detail  # fmt: skip
    _refused(svc, {"inputs": [{**two, "shape": [2 * width]}]}, "inputs[0].shape")
    one = svc.client.post(INFER, json={"inputs": [{**_tensor(rows[:1]), "shape": [width]}]})
    assert one.status_code == 200, one.text
    both = svc.client.post(INFER, json={"inputs": [two]}).json()
    assert one.json()["outputs"][0]["data"] == both["outputs"][0]["data"][:1]
