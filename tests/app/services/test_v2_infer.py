"""The V2 protocol's checks that need no model or database (app/services/v2_infer.py): the version a path gives
and the binary tensor data extension. The routes' answers are tests/app/api/test_errors.py's and tests/e2e's."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from app.core.errors import NotFound, ValidationFailed
from app.schemas.inference import InferRequest
from app.services import v2_infer


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
