"""A request never streams a large local CSV / JSON-lines file through the API process for a column's values (the
classes of a label, its largest value, a categorical column's levels): beyond ``summary.SUMMARY_BYTES`` those checks
are left to the job (its planning has Spark read them), as ``count_numbers`` and the registration's summary already did.
A 3-million-row CSV (250 MB) made ``POST /train`` of a classifier read every line three times in the request (the
negative-label check, the class count) and hold the label column's 3 million strings at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from app.core.errors import ValidationFailed
from app.core.settings import Settings
from app.schemas.train import TrainRequest
from app.services.datasets import schema, summary
from app.services.datasets.deferred import DeferredCheck, request_without_spark
from app.services.planning.training import plan_training


@pytest.fixture
def data(tmp_path: Path) -> Path:
    rng = np.random.default_rng(5)
    rows = pd.DataFrame({"a": rng.normal(size=400), "b": rng.normal(size=400), "label": np.arange(400) % 3,
                         "name": [f"c{i % 4}" for i in range(400)]})  # fmt: skip
    rows.to_csv(tmp_path / "rows.csv", index=False)
    rows.to_json(tmp_path / "rows.json", orient="records", lines=True)
    return tmp_path


def _body(uri: str) -> dict[str, Any]:
    return {"name": "m", "framework": "xgboost", "params": {"num_round": 2},
            "dataset": {"uri": uri, "features": ["a", "b"], "label": "label", "task": "classification"}}  # fmt: skip


def _plan(spark: Any, data: Path, uri: str) -> Any:
    return plan_training(request=TrainRequest.model_validate(_body(uri)), settings=Settings(data_roots=[data]),
                         spark=spark)  # fmt: skip


@pytest.mark.parametrize("uri", ["rows.csv", "rows.json"])
def test_a_small_file_is_planned_in_the_request(spark: Any, data: Path, uri: str) -> None:
    with request_without_spark():
        assert _plan(spark, data, uri).train.num_classes == 3


@pytest.mark.parametrize("uri", ["rows.csv", "rows.json"])
def test_a_file_over_the_bound_is_left_to_the_job(
    spark: Any, data: Path, uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(summary, "SUMMARY_BYTES", (data / uri).stat().st_size - 1)
    with request_without_spark(), pytest.raises(DeferredCheck):  # the request reads no value of the file
        _plan(spark, data, uri)
    assert _plan(spark, data, uri).train.num_classes == 3  # the job plans it with Spark


def test_column_values_of_a_large_file_are_read_by_the_job_not_the_request(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(data / "rows.csv")
    options = schema.reader_options("csv", {})
    assert schema.max_value(path, "csv", options, "label") == 2
    assert sorted(schema.distinct_values(path, "csv", options, "name", limit=10) or []) == ["c0", "c1", "c2", "c3"]
    monkeypatch.setattr(summary, "SUMMARY_BYTES", (data / "rows.csv").stat().st_size - 1)
    with request_without_spark(), pytest.raises(DeferredCheck):
        schema.max_value(path, "csv", options, "label")
    with request_without_spark(), pytest.raises(DeferredCheck):
        schema.distinct_values(path, "csv", options, "name", limit=10)
    assert schema.max_value(path, "csv", options, "label") is schema.NOT_LOCAL  # the job's planning: Spark reads them
    assert schema.distinct_values(path, "csv", options, "name", limit=10) is None
    assert schema.large_local_text(path, "csv", options)


@pytest.mark.parametrize(("labels", "words"), [("negative", "has the class -1"), ("fractions", "holds fractions")])
def test_the_job_still_refuses_labels_that_are_not_classes_in_a_large_file(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, labels: str, words: str
) -> None:
    """Review: with the request's reads bounded, a -1/1 or fractional class label in a large CSV was no longer
    refused at all (those checks read local data only): each row became a bad row of the job."""
    rng = np.random.default_rng(5)
    label = np.where(np.arange(400) % 2, 1, -1) if labels == "negative" else (np.arange(400) % 3) + 0.5
    pd.DataFrame({"a": rng.normal(size=400), "b": rng.normal(size=400), "label": label}).to_csv(
        tmp_path / "rows.csv", index=False
    )
    monkeypatch.setattr(summary, "SUMMARY_BYTES", (tmp_path / "rows.csv").stat().st_size - 1)
    with request_without_spark(), pytest.raises(DeferredCheck):  # the request accepts it and leaves it to the job
        _plan(spark, tmp_path, "rows.csv")
    with pytest.raises(ValidationFailed) as refused:  # the job's planning: INVALID_REQUEST in the request's words
        _plan(spark, tmp_path, "rows.csv")
    assert words in str(refused.value), refused.value
