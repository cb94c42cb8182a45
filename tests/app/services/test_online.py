"""Online prediction's feature matrix: JSON values that are not numbers (a string of digits, a boolean) are refused
on every body format, as the careful path always did, although numpy's quick conversion would take them; the
answer names the row and the column. The quick path and the careful path agree on every well-formed row."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.errors import ValidationFailed
from app.schemas.inference import PredictRequest
from app.services.online import _careful_matrix, _fast_matrix, check_input_names, feature_matrix, inline_rows
from workers.inference.signature import build_signature
from workers.inference.spec import ModelRef

TYPES = {"passenger_count": "int", "trip_distance": "double", "hour": "int", "h_distance": "double"}
FEATURES = list(TYPES)


def _model(framework: str = "xgboost", types: dict[str, str] = TYPES) -> ModelRef:
    card: dict[str, Any] = {"features": list(types)}
    card["signature"] = build_signature(card, types, framework)
    return ModelRef(framework=framework, uri="file:///m", card=card, name="m", version=1)


MODEL = _model()
GOOD = {"passenger_count": 1, "trip_distance": 2.1, "hour": 9, "h_distance": 2.7}


def _matrix(body: dict[str, Any], model: ModelRef = MODEL) -> Any:
    request = PredictRequest.model_validate({"model": {"name": "m"}, **body})
    return feature_matrix(inline_rows(request, model), model, "rows")


def _bodies(column: str, value: Any) -> list[dict[str, Any]]:
    """The same two rows, the second with ``column`` set to ``value``, in each inline body format."""
    rows = [GOOD, {**GOOD, column: value}]
    return [
        {"dataframe_records": rows},
        {"dataframe_split": {"columns": FEATURES, "data": [[r[f] for f in FEATURES] for r in rows]}},
        {"instances": [[r[f] for f in FEATURES] for r in rows]},
        {"instances": rows},
        {"inputs": {f: [r[f] for r in rows] for f in FEATURES}},
        {"inputs": rows},
    ]


@pytest.mark.parametrize("framework", ["xgboost", "spark_ml", "torch"])
@pytest.mark.parametrize(
    ("column", "value", "takes"),
    [
        ("h_distance", "2.7", "numbers"),
        ("hour", "9", "whole numbers"),
        ("h_distance", True, "numbers"),
        ("hour", False, "whole numbers"),
        ("trip_distance", "abc", "numbers"),
        ("h_distance", [2.7], "numbers"),
    ],
)
def test_a_value_that_is_not_a_number_is_named_by_row_and_column(
    framework: str, column: str, value: Any, takes: str
) -> None:
    model = _model(framework)
    for body in _bodies(column, value):
        with pytest.raises(ValidationFailed) as caught:
            _matrix(body, model)
        assert caught.value.errors == [
            {"loc": "rows[1]", "in": "body", "msg": caught.value.errors[0]["msg"], "type": "value_error"}
        ], body
        message = caught.value.errors[0]["msg"]
        given = json.dumps(value)
        assert message.startswith(f"column {column!r} takes {takes}: {given} is not a number"), (body, message)
        assert f"the model expects {column}: " in message


def test_the_rows_that_are_numbers_are_answered_as_before() -> None:
    for body in _bodies("h_distance", 3.5):
        assert _matrix(body).tolist() == np.asarray([[1, 2.1, 9, 2.7], [1, 2.1, 9, 3.5]], dtype=np.float32).tolist()


def test_a_boolean_column_takes_booleans() -> None:
    model = _model(types={**TYPES, "is_weekend": "boolean"})
    x = _matrix({"dataframe_records": [{**GOOD, "is_weekend": True}, {**GOOD, "is_weekend": False}]}, model)
    assert x[:, -1].tolist() == [1.0, 0.0]


@pytest.mark.parametrize(
    ("value", "shown"),
    [(None, "null"), (float("nan"), "NaN"), (float("inf"), "Infinity"), (1e39, "1e+39"), (10**400, "within float32")],
    ids=["null", "nan", "inf", "beyond-float32", "beyond-float64"],
)
def test_a_value_the_model_cannot_take_names_its_column(value: Any, shown: str) -> None:
    for rows in ([GOOD, {**GOOD, "h_distance": value}], [list(GOOD.values()), [1, 2.1, 9, value]]):
        with pytest.raises(ValidationFailed) as caught:
            feature_matrix(rows, MODEL, "rows")
        assert caught.value.errors[0]["loc"] == "rows[1]"
        assert caught.value.errors[0]["msg"].startswith("column 'h_distance'"), caught.value.detail
        assert shown in caught.value.detail


def test_null_says_null_not_nan() -> None:
    with pytest.raises(ValidationFailed, match=r"column 'hour' is null: a feature is NaN, infinite, missing"):
        _matrix({"dataframe_records": [{**GOOD, "hour": None}]})


def test_an_array_column_names_the_element() -> None:
    digits = ModelRef(framework="torch", uri="file:///d", card={"features": ["pixels"], "array_column": True,
                                                                "input_shape": [4]}, name="d", version=1)  # fmt: skip
    with pytest.raises(ValidationFailed, match=r"column 'pixels\[2\]' is null"):
        feature_matrix([[0.0, 1.0, None, 3.0]], digits, "rows")
    with pytest.raises(ValidationFailed, match=r"column 'pixels' takes arrays of numbers: \"2\" is not a number"):
        feature_matrix([{"pixels": [0.0, 1.0, "2", 3.0]}], digits, "rows")
    with pytest.raises(ValidationFailed, match=r"true is not a number"):
        feature_matrix([[0.0, True, 2.0, 3.0]], digits, "rows")


def test_a_misspelt_column_is_named_as_missing_and_unexpected() -> None:
    misspelt = {**{k: v for k, v in GOOD.items() if k != "h_distance"}, "h_dist": 2.7}
    for body, loc in (
        ({"dataframe_records": [GOOD, misspelt]}, "dataframe_records[1]"),
        (
            {"dataframe_split": {"columns": list(misspelt), "data": [list(misspelt.values())]}},
            "dataframe_split.columns",
        ),
        ({"inputs": {k: [v] for k, v in misspelt.items()}}, "inputs"),
    ):
        with pytest.raises(ValidationFailed) as caught:
            _matrix(body)
        assert caught.value.errors[0]["loc"] == loc
        assert caught.value.errors[0]["msg"].startswith(
            "missing features ['h_distance']; unexpected features ['h_dist']; the model expects passenger_count: long"
        ), caught.value.detail
    with pytest.raises(ValidationFailed, match=r"^inputs: missing inputs \['h_distance'\]; unexpected inputs"):
        check_input_names([*FEATURES[:-1], "h_dist"], MODEL)
    with pytest.raises(ValidationFailed, match=r"^inputs: unexpected inputs \['extra'\]; the model expects"):
        check_input_names([*FEATURES, "extra"], MODEL)


_JSON_NUMBER = st.one_of(st.integers(-(2**53), 2**53), st.floats(-1e30, 1e30, allow_nan=False))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_JSON_NUMBER, min_size=4, max_size=4), min_size=1, max_size=8))
def test_the_quick_and_the_careful_path_agree(rows: list[list[Any]]) -> None:
    """Well-formed rows take the quick path, and it gives what the careful path gives."""
    model = replace(MODEL, card={**MODEL.card, "signature": build_signature(MODEL.card, None, "xgboost")})
    quick = _fast_matrix(rows, model)
    assert quick is not None
    records = [dict(zip(FEATURES, row, strict=True)) for row in rows]
    assert np.array_equal(_fast_matrix(records, model), quick)
    mixed = [*rows, [True, 0, 0, 0]]  # one boolean sends every row down the careful path
    assert _fast_matrix(mixed, model) is None
    with pytest.raises(ValidationFailed, match=rf"rows\[{len(rows)}\]: column 'passenger_count'"):
        feature_matrix(mixed, model, "rows")
    assert np.array_equal(_careful_matrix(rows, model, "rows"), quick)
    assert np.array_equal(_careful_matrix(records, model, "rows"), quick)


def test_a_row_of_the_wrong_length_says_so_before_the_types() -> None:
    for row in ([1, 2.1, 9, 2.7, "x"], [1, "2.1", 9]):
        with pytest.raises(ValidationFailed, match=rf"^rows\[0\]: {len(row)} values; the model needs 4"):
            feature_matrix([row], MODEL, "rows")


def _digits(framework: str = "torch") -> ModelRef:
    card: dict[str, Any] = {"features": ["pixels"], "array_column": True, "input_shape": [1, 2, 2]}
    card["signature"] = build_signature(card, {"pixels": "array<double>"}, framework)
    return ModelRef(framework=framework, uri="file:///d", card=card, name="d", version=1)


def test_an_image_sent_as_nested_rows_is_one_row_of_pixels() -> None:
    digits = _digits()
    for rows in ([[[1, 2], [3, 4]]], [[[[1, 2], [3, 4]]]], [{"pixels": [[1, 2], [3, 4]]}], [[1, 2, 3, 4]]):
        assert feature_matrix(rows, digits, "rows").tolist() == [[1.0, 2.0, 3.0, 4.0]], rows
    with pytest.raises(ValidationFailed, match=r"'pixels' takes arrays of numbers: \"3\" is not a number"):
        feature_matrix([[[1, 2], ["3", 4]]], digits, "rows")


def test_a_one_feature_model_checks_scalar_rows() -> None:
    one = _model(types={"h_distance": "double"})
    assert feature_matrix([1.5, 2], one, "rows").tolist() == [[1.5], [2.0]]
    for bad in (True, "2.5"):
        with pytest.raises(ValidationFailed, match=r"column 'h_distance' takes numbers: .* is not a number"):
            feature_matrix([1.5, bad], one, "rows")


def test_a_sequence_step_that_is_not_a_number_is_refused() -> None:
    from workers.inference.sequences import pad_inline

    x, lengths = pad_inline([[[1, 2.5], [0.5, 3]]], 2)
    assert x.tolist() == [[[1.0, 2.5], [0.5, 3.0]]] and lengths.tolist() == [2]
    for bad in ("1", True):
        with pytest.raises(ValueError, match=r"\[0\]: step 1: .* is not a number"):
            pad_inline([[[1, 2.5], [bad, 3]]], 2)


def test_a_rows_answer_does_not_depend_on_the_other_rows() -> None:
    """The quick path holds boolean and whole-number columns to what the careful path does, value by value."""
    flags = _model(types={"a": "double", "flag": "boolean"})
    longs = _model(types={"a": "long", "b": "double"})
    for model, bad, fine, message in (
        (flags, [1.5, 2], [1.5, True], "2 is not a boolean"),
        (longs, [9.0000001, 2], [1, 2.5], "9.0000001 is not a whole number"),
    ):
        for rows in ([bad], [bad, fine], [fine, bad]):
            with pytest.raises(ValidationFailed, match=message):
                feature_matrix(rows, model, "rows")


def test_a_model_with_a_boolean_column_keeps_the_quick_path() -> None:
    model = _model(types={**TYPES, "is_weekend": "boolean"})
    rows = [[1, 2.1, 9, 2.7, True], [2, 0.5, 23, 0.4, 0]]
    quick = _fast_matrix(rows, model)
    assert quick is not None and quick.tolist() == _careful_matrix(rows, model, "rows").tolist()
    assert _fast_matrix([[1, 2.1, 9, 2.7, "true"]], model) is None  # the careful path names it


def test_a_split_row_of_the_wrong_length_is_named() -> None:
    row = [GOOD[f] for f in FEATURES]
    for data, count in (([row, [*row, 5.0]], "5 values"), ([row, row[:3]], "3 values")):
        with pytest.raises(ValidationFailed) as caught:
            _matrix({"dataframe_split": {"columns": FEATURES, "data": data}})
        assert caught.value.errors[0]["loc"] == "dataframe_split.data[1]"
        assert caught.value.errors[0]["msg"].startswith(f"{count} for 4 columns"), caught.value.detail
