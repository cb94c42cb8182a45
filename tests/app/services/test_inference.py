"""Online prediction input: odd bodies get a 422 that names the problem (each of these was a 500 under the fuzzer
of tests/e2e/test_fuzz.py), and batch output paths are checked before a job is queued."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.core.errors import ValidationFailed
from app.core.settings import Settings
from app.schemas.inference import PredictRequest
from app.services.online import check_row_limit, feature_matrix, inline_rows
from app.services.planning.inference import output_path
from workers.inference.spec import ModelRef

MODEL = ModelRef(framework="spark_ml", uri="file:///m", card={"features": ["x1", "x2"]}, name="m", version=1)


def _rows(**body: Any) -> Any:
    return inline_rows(PredictRequest.model_validate({"model": {"name": "m"}, **body}), MODEL)


def test_columns_of_inputs_are_lists_of_one_length() -> None:
    assert _rows(inputs={"x1": [1, 2], "x2": [3, 4]}) == [{"x1": 1, "x2": 3}, {"x1": 2, "x2": 4}]
    for inputs in ({"x1": [1, 2], "x2": [3]}, {"x1": 1, "x2": 2}, {"x1": [1], "x2": None}):
        with pytest.raises(ValidationFailed, match="one length"):
            _rows(inputs=inputs)


def test_no_rows_is_a_422() -> None:
    settings = Settings()
    for body in ({"instances": []}, {"inputs": {}}, {"dataframe_records": []}):
        with pytest.raises(ValidationFailed, match="no rows"):
            check_row_limit(len(_rows(**body)), settings)


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        ([[10**400, 1]], "must be numbers"),  # beyond float64
        ([{"x1": 10**400, "x2": 1}], "must be numbers"),
        ([[1e39, 1]], "beyond float32"),  # finite as float64, infinite as the model's float32
        ([[float("nan"), 1]], "NaN"),
        ([[None, 1]], "missing"),
    ],
)
def test_features_a_model_cannot_take(rows: list[Any], words: str) -> None:
    with pytest.raises(ValidationFailed, match=words):
        feature_matrix(rows, MODEL, "rows")


def test_features_at_the_float32_limit() -> None:
    biggest = float(np.finfo(np.float32).max)
    x = feature_matrix([[biggest, -biggest]], replace(MODEL, framework="torch"), "rows")
    assert x.dtype == np.float32 and np.isfinite(x).all()
    exact = feature_matrix([[0.1, 3.23]], MODEL, "rows")  # a Spark ML pipeline takes the doubles as they are
    assert exact.dtype == np.float64 and exact.tolist() == [[0.1, 3.23]]


@pytest.mark.parametrize("given", ["out\x00.parquet", "o" * 300, "sub/" + "d" * 300 + "/out.parquet"])
def test_unusable_output_paths(tmp_path: Path, given: str) -> None:
    settings = Settings(var_dir=tmp_path.parent / f"{tmp_path.name}-var", data_roots=[tmp_path])
    with pytest.raises(ValidationFailed, match=r"NUL byte|not a usable path"):
        output_path(settings, MODEL, given)


def test_a_new_output_path_inside_the_roots(tmp_path: Path) -> None:
    settings = Settings(var_dir=tmp_path.parent / f"{tmp_path.name}-var", data_roots=[tmp_path])
    assert output_path(settings, MODEL, "preds/out.parquet") == str(tmp_path / "preds" / "out.parquet")


def test_a_data_root_itself_is_named_as_one(tmp_path: Path) -> None:
    """It was said to lie outside the data roots, whose list held it (walkthrough)."""
    settings = Settings(var_dir=tmp_path.parent / f"{tmp_path.name}-var", data_roots=[tmp_path])
    with pytest.raises(ValidationFailed, match=r"is a data root; name a new path inside it \(for example "):
        output_path(settings, MODEL, str(tmp_path))


def test_planning_an_output_path_creates_nothing(tmp_path: Path) -> None:
    """A request refused after its output path was planned leaves no directory behind: the job's write makes them."""
    settings = Settings(var_dir=tmp_path.parent / f"{tmp_path.name}-var", data_roots=[tmp_path])
    assert output_path(settings, MODEL, "new/deeper/out") == str(tmp_path / "new" / "deeper" / "out")
    assert not (tmp_path / "new").exists()
    (tmp_path / "rows.csv").write_text("x\n1\n")
    with pytest.raises(ValidationFailed, match=r"not a usable path: 'rows.csv' is a file"):
        output_path(settings, MODEL, "rows.csv/more/out")


def test_the_shipped_datasets_are_never_an_output(tmp_path: Path) -> None:
    """They are a default data root, so any key wrote batch predictions into the install (security walkthrough)."""
    from app.core.settings import REPO_ROOT

    settings = Settings(var_dir=tmp_path / "var", data_roots=[REPO_ROOT / "datasets", tmp_path / "data"])
    with pytest.raises(ValidationFailed, match=r"lies in the shipped sample datasets .* no job writes into"):
        output_path(settings, MODEL, str(REPO_ROOT / "datasets" / "bobout"))
    assert output_path(settings, MODEL, "preds") == str(tmp_path / "data" / "preds")  # relative: the default's root
    shipped_first = Settings(var_dir=tmp_path / "var", data_roots=[REPO_ROOT / "datasets", tmp_path / "data"])
    assert output_path(shipped_first, MODEL, None).startswith(str(tmp_path / "data" / "predictions"))  # not datasets/
    # the shipped samples last: a relative output went into them ("the last root"), and the refusal said the default
    # went "under the var dir" (data walkthrough). It goes where the default output goes, which the message names
    shipped_last = Settings(var_dir=tmp_path / "var", data_roots=[tmp_path / "data", REPO_ROOT / "datasets"])
    assert output_path(shipped_last, MODEL, "preds") == str(tmp_path / "data" / "preds")
    with pytest.raises(ValidationFailed, match=r"predictions go under .*/data/predictions\) or name"):
        output_path(shipped_last, MODEL, str(REPO_ROOT / "datasets" / "bobout"))
