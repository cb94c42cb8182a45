"""The V2 protocol's checks that need no model or database (app/services/v2_infer.py): the version a path gives,
the binary tensor data extension, the rows a request's tensors make for a model's card, and the outputs its metadata
lists. The routes' answers are tests/app/api/test_errors.py's, test_v2_*.py's and tests/e2e's."""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import pytest

from app.core.errors import NotFound, ValidationFailed
from app.schemas.inference import InferRequest
from app.services import v2_infer
from workers.inference.signature import build_signature
from workers.inference.spec import ModelRef


def _no_db() -> Any:
    raise AssertionError("a path refused by its own check reads no database")


def _request(*inputs: dict[str, Any]) -> InferRequest:
    return InferRequest.model_validate({"inputs": list(inputs)})


@pytest.mark.parametrize(("version", "error"), [("1.0", ValidationFailed), ("-1", ValidationFailed),
                                                ("٣", ValidationFailed), ("0", NotFound)])  # fmt: skip
def test_a_version_that_no_model_has_is_refused_before_the_database(version: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        v2_infer.resolve(db=_no_db, name="taxi", version=version, owner=None)  # type: ignore[arg-type]


def test_binary_tensors_take_their_bytes_in_order() -> None:
    body = _request(
        {"name": "a", "shape": [2], "datatype": "FP32", "data": [], "parameters": {"binary_data_size": 8}},
        {"name": "b", "shape": [1], "datatype": "INT64", "data": [7]},
        {"name": "c", "shape": [1], "datatype": "BOOL", "data": [], "parameters": {"binary_data_size": 1}},
    )
    v2_infer.read_binary_data(body=body, raw=b"{}" + struct.pack("<2f", 1.5, -2.0) + b"\x01", offset=2)
    assert [t.data for t in body.inputs] == [[1.5, -2.0], [7], [True]]


@pytest.mark.parametrize(
    ("datatype", "size", "loc", "msg"),
    [
        ("BYTES", 4, "inputs.a.datatype", "BYTES is not numeric"),
        ("FP32", 8, "inputs.a.parameters.binary_data_size", "8 is not a byte count within the 4 bytes left"),
        ("FP32", True, "inputs.a.parameters.binary_data_size", "True is not a byte count"),
        ("FP64", 4, "inputs.a", "binary data: "),
    ],
)
def test_binary_tensors_that_do_not_fit_are_located(datatype: str, size: Any, loc: str, msg: str) -> None:
    body = _request({"name": "a", "shape": [1], "datatype": datatype, "data": [],
                     "parameters": {"binary_data_size": size}})  # fmt: skip
    with pytest.raises(ValidationFailed) as caught:
        v2_infer.read_binary_data(body=body, raw=b"{}\x00\x00\x00\x00", offset=2)
    assert caught.value.errors is not None
    assert caught.value.errors[0]["loc"] == loc and caught.value.errors[0]["msg"].startswith(msg)


def test_binary_data_is_all_claimed_and_bool_bytes_are_0_or_1() -> None:
    """Bytes after the declared binary data were dropped without a word, and a BOOL byte of 2 was read as true."""
    tensor = {"name": "a", "shape": [2], "datatype": "BOOL", "data": [], "parameters": {"binary_data_size": 2}}
    body = _request(tensor)
    v2_infer.read_binary_data(body=body, raw=b"{}\x00\x01", offset=2)
    assert body.inputs[0].data == [False, True]
    for raw, loc, msg in (
        (b"{}\x00\x01\x00", "body", "1 bytes after the binary tensor data that no input's binary_data_size claims"),
        (b"{}\x01\x02", "inputs.a.data", "binary data: byte 1 is 2; BOOL bytes are 0 (false) or 1 (true)"),
    ):
        with pytest.raises(ValidationFailed) as caught:
            v2_infer.read_binary_data(body=_request(tensor), raw=raw, offset=2)
        assert caught.value.errors is not None
        assert caught.value.errors[0]["loc"] == loc and caught.value.errors[0]["msg"].startswith(msg), caught.value
    with pytest.raises(ValidationFailed, match="2 bytes after the binary tensor data"):  # no binary tensor at all
        v2_infer.read_binary_data(body=_request({**tensor, "data": [True, False], "parameters": {}}), raw=b"{}ab",
                                  offset=2)  # fmt: skip


def _model(types: dict[str, str], framework: str = "xgboost", **card: Any) -> ModelRef:
    fields: dict[str, Any] = {"features": list(types), "task": "regression", "labels": ["fare_amount"], **card}
    fields["signature"] = build_signature(fields, types, framework)
    return ModelRef(framework=framework, uri="file:///m", card=fields, name="m", version=1)


TWO = _model({"trip_distance": "double", "h_distance": "double"})
ELEVEN = _model({f"f{i}": "double" for i in range(10)} | {"trip_distance": "double"})


def _feature(name: str, shape: list[int], data: list[Any], datatype: str = "FP64") -> dict[str, Any]:
    return {"name": name, "shape": shape, "datatype": datatype, "data": data}


def _refused(model: ModelRef, *inputs: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(ValidationFailed) as caught:
        v2_infer._rows(_request(*inputs), model)
    assert caught.value.errors is not None
    return caught.value.errors[0]["loc"], caught.value.errors[0]["msg"]


def test_a_lone_tensor_named_after_a_feature_needs_the_other_features() -> None:
    """Two rows of trip_distance were one row of both features (200, one prediction), and one tensor trip_distance
    [11] one row of an 11-feature model: the per-feature form needs every feature, as the docs say."""
    loc, msg = _refused(TWO, _feature("trip_distance", [2], [2.1, 9.5]))
    assert (loc, msg.split(";")[0]) == ("inputs", "missing inputs ['h_distance']"), msg
    loc, msg = _refused(TWO, _feature("trip_distance", [1, 2], [2.1, 9.5]))
    assert msg.startswith("missing inputs ['h_distance']"), msg
    loc, msg = _refused(ELEVEN, _feature("trip_distance", [11], [1.0] * 11))
    assert msg.startswith(f"missing inputs {[f'f{i}' for i in range(10)]}"), msg
    # the whole-rows form is a tensor of any other name: [rows, width], or [width] for one row
    whole = v2_infer._rows(_request(_feature("input", [2, 2], [2.1, 2.7, 9.5, 9.9])), TWO)
    assert whole.tolist() == [[2.1, 2.7], [9.5, 9.9]]
    assert v2_infer._rows(_request(_feature("x", [2], [2.1, 2.7])), TWO).tolist() == [[2.1, 2.7]]
    one = _model({"trip_distance": "double"})  # one feature: a tensor named after it is its rows either way
    assert v2_infer._rows(_request(_feature("trip_distance", [2], [2.1, 9.5])), one).tolist() == [[2.1], [9.5]]


def test_per_feature_tensors_are_one_value_per_row_and_the_same_rows() -> None:
    """passenger_count [3, 2] next to trip_distance [3, 0] made rows of two values, shifted into the wrong columns."""
    model = _model({"passenger_count": "long", "trip_distance": "double"})
    loc, msg = _refused(model, _feature("passenger_count", [3, 2], [1, 2, 1, 3, 1, 4], "INT64"),
                        _feature("trip_distance", [3, 0], []))  # fmt: skip
    assert (loc, msg) == ("inputs.passenger_count.shape", "[3, 2]: a feature's tensor is [rows] or [rows, 1], one "
                          "value per row (whole rows of every feature are one tensor [rows, 2])")  # fmt: skip
    loc, msg = _refused(
        model, _feature("passenger_count", [3], [1, 2, 1], "INT64"), _feature("trip_distance", [3, 0], [])
    )
    assert loc == "inputs.trip_distance.shape" and msg.startswith("[3, 0]: a feature's tensor is [rows] or [rows, 1]")
    loc, msg = _refused(model, _feature("passenger_count", [2], [1, 2], "INT64"),
                        _feature("trip_distance", [3], [2.1, 9.5, 1.0]))  # fmt: skip
    assert (loc, msg) == ("inputs.trip_distance.shape", "[3] holds 3 rows, and 'passenger_count' [2] 2: every "
                          "feature's tensor holds the same rows")  # fmt: skip
    x = v2_infer._rows(_request(_feature("trip_distance", [2, 1], [2.1, 9.5]),
                                _feature("passenger_count", [2], [1, 3], "INT64")), model)  # fmt: skip
    assert x.tolist() == [[1, 2.1], [3, 9.5]]  # the model's order, whatever the request's


FLAGGED = _model({"trip_distance": "double", "weekend": "boolean", "hour": "long"})


@pytest.mark.parametrize(
    "inputs",
    [[_feature("input", [3], [2.1, -7, 9])],
     [_feature("rows", [1, 3], [[2.1, -7, 9]])],
     [_feature("trip_distance", [1], [2.1]), _feature("weekend", [1], [-7]), _feature("hour", [1], [9])]],
    ids=["whole-row", "nested", "per-feature"],
)  # fmt: skip
def test_a_boolean_column_takes_0_and_1_as_predict_does(inputs: list[dict[str, Any]]) -> None:
    """A boolean feature given -7 (or 2.5) was answered; /predict says "column 'weekend' takes booleans"."""
    settings = SimpleNamespace(max_predict_rows=10)
    with pytest.raises(ValidationFailed) as caught:
        v2_infer._infer_rows(settings, None, None, FLAGGED, _request(*inputs))  # type: ignore[arg-type]
    assert caught.value.errors is not None
    assert caught.value.errors[0] == {"loc": "inputs", "in": "body", "type": "value_error",
                                      "msg": "row 0, column 'weekend' takes booleans: -7 is not a boolean; the model "
                                             "expects weekend: boolean"}  # fmt: skip
    fraction = [
        _feature("trip_distance", [2], [2.1, 3]),
        _feature("weekend", [2], [1, 2.5]),
        _feature("hour", [2], [9, 1]),
    ]
    with pytest.raises(ValidationFailed, match=r"row 1, column 'weekend' takes booleans: 2\.5 is not a boolean"):
        v2_infer._infer_rows(settings, None, None, FLAGGED, _request(*fraction))  # type: ignore[arg-type]


def test_booleans_as_numbers_or_a_bool_tensor_fit_a_boolean_column() -> None:
    from app.services import online

    for weekend in (_feature("weekend", [2], [1, 0]), _feature("weekend", [2], [True, False], "BOOL")):
        x = v2_infer._rows(_request(_feature("trip_distance", [2], [2.1, 3]), weekend, _feature("hour", [2], [9, 1])),
                           FLAGGED)  # fmt: skip
        online.check_booleans(x, FLAGGED, "inputs")
        assert x[:, 1].tolist() == [1.0, 0.0]


@pytest.mark.parametrize(
    ("card", "shape"),
    [({"labels": ["fare_amount", "pickup_latitude"]}, [-1, 2]),
     ({"labels": ["fare_amount"]}, [-1]),
     ({"labels": ["a", "b"], "sequence": {"labels": "per_step"}}, [-1, -1, 2]),
     ({"labels": ["y"], "task": "classification", "num_classes": 3}, [-1])],
)  # fmt: skip
def test_the_metadata_gives_the_predictions_shape_infer_answers(card: dict[str, Any], shape: list[int]) -> None:
    """A regression on two label columns answers [rows, 2]; its metadata said [-1]."""
    model = _model({"trip_distance": "double"}, "torch", **card)
    spec = next(s for s in v2_infer._output_specs(model) if s["name"] == "predictions")
    assert spec["shape"] == shape
    if model.task == "regression" and not model.card.get("sequence"):  # what infer makes of two rows' values
        values = [[0.5, 1.5], [2.5, 3.5]] if len(model.labels) > 1 else [0.5, 2.5]  # the loader's, per row
        answered = v2_infer._values_tensor(values).shape
        assert len(answered) == len(shape) and answered[1:] == shape[1:]
