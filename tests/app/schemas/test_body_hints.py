"""An unknown field in a body names the field of its object it is closest to: a typo is the usual cause (a fresh
user's audit: ``dataset.lable`` said only "Extra inputs are not permitted")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.schemas.train import TrainRequest

REPO = Path(__file__).resolve().parents[3]


def test_a_typo_names_the_field_meant_at_any_depth_and_other_errors_keep_their_words() -> None:
    body = json.loads((REPO / "examples" / "xgboost-taxi.json").read_text())
    body["dataset"]["lable"] = body["dataset"].pop("label")
    body["dataset"]["num_classes"] = "3"
    body["traning"] = {}
    body["zzz"] = 1
    with pytest.raises(ValidationError) as refused:
        TrainRequest.model_validate(body)
    got = {".".join(map(str, e["loc"])): (e["type"], e["msg"]) for e in refused.value.errors()}
    assert got["dataset.lable"] == ("extra_forbidden", "Extra inputs are not permitted; did you mean 'label'?")
    assert got["traning"] == ("extra_forbidden", "Extra inputs are not permitted; did you mean 'training'?")
    assert got["zzz"] == ("extra_forbidden", "Extra inputs are not permitted")  # nothing close
    assert got["dataset.num_classes"][0] == "value_error" and "without quotes" in got["dataset.num_classes"][1]


def test_write_it_without_quotes_only_when_that_would_be_right() -> None:
    """``"version": "one"`` was told to write it without quotes (walkthrough)."""
    body = json.loads((REPO / "examples" / "xgboost-taxi.json").read_text())
    for given, hinted in (("3", True), (" 3 ", True), ("one", False), ("1.5", False), ("true", False)):
        body["dataset"]["num_classes"] = given
        with pytest.raises(ValidationError) as refused:
            TrainRequest.model_validate(body)
        (message,) = [e["msg"] for e in refused.value.errors() if e["loc"] == ("dataset", "num_classes")]
        assert message.startswith("Value error, must be a whole number, got the text"), message
        assert ("(write it without quotes)" in message) is hinted, (given, message)


def test_a_model_given_as_text_is_told_to_be_an_object() -> None:
    from app.schemas.inference import EvaluateRequest, PredictRequest

    for schema, body in ((PredictRequest, {"instances": [[1.0]]}), (EvaluateRequest, {"dataset": {"uri": "x.csv"}})):
        with pytest.raises(ValidationError) as refused:
            schema.model_validate({"model": "taxi-fare", **body})
        (error,) = refused.value.errors()
        assert error["loc"] == ("model",), error
        assert 'not the text "taxi-fare": write {"name": "taxi-fare"}' in error["msg"], error


def test_a_model_to_start_from_given_as_text_is_told_to_be_an_object() -> None:
    from bench.chaos import digits_job

    body = digits_job("fine-tuned", epochs=1)
    body["training"]["init_from"] = "digits-mlp"
    with pytest.raises(ValidationError) as refused:
        TrainRequest.model_validate(body)
    (error,) = refused.value.errors()
    assert error["loc"] == ("training", "init_from"), error
    assert 'not the text "digits-mlp": write {"name": "digits-mlp"}' in error["msg"], error
