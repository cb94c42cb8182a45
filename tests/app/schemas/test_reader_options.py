"""Reader options are an allow-list of Spark's documented options per format (app/schemas/reader_options.py): a
Hadoop setting in ``options`` (``fs.defaultFS`` with a ViewFS mount table) read any file the driver could read,
through every body that names a dataset (security walkthrough F1)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from app.schemas.body import _SWITCHES
from app.schemas.datasets import DatasetCreate
from app.schemas.inference import EvaluateRequest, PredictRequest
from app.schemas.reader_options import TAKEN
from app.schemas.train import TrainRequest

VIEWFS = {"header": "true", "fs.defaultFS": "viewfs://evil", "fs.viewfs.mounttable.evil.link./data": "file:///secret"}
TRAIN = {"name": "m", "framework": "spark_ml", "params": {"algorithm": "linear_regression"},
         "dataset": {"uri": "rows.csv", "features": ["x"], "label": "y", "task": "regression"}}  # fmt: skip


def _with(body: dict[str, Any], where: str, options: dict[str, str]) -> dict[str, Any]:
    copy: dict[str, Any] = {**body}
    if where == "validation":
        copy["validation"] = {"uri": "eval.csv", "options": options}
    else:
        copy[where] = {**copy[where], "options": options}
    return copy


BODIES = [
    (DatasetCreate, lambda o: {"uri": "/data", "format": "csv", "options": o}, "options"),
    (TrainRequest, lambda o: _with(TRAIN, "dataset", o), "dataset.options"),
    (TrainRequest, lambda o: _with(TRAIN, "validation", o), "validation.options"),
    (EvaluateRequest, lambda o: {"model": {"name": "m"}, "dataset": {"uri": "rows.csv", "options": o}},
     "dataset.options"),
    (PredictRequest, lambda o: {"model": {"name": "m"}, "dataset": {"uri": "rows.csv", "key": "id", "options": o}},
     "dataset.options"),
]  # fmt: skip


def _refused(model: type[BaseModel], body: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(ValidationError) as refused:
        model.model_validate(body)
    error = refused.value.errors()[0]
    return ".".join(str(p) for p in error["loc"]), str(error["msg"])


@pytest.mark.parametrize(("model", "body", "loc"), BODIES)
@pytest.mark.parametrize(
    "options",
    [VIEWFS, {"FS.DEFAULTFS": "hdfs://anyhost:8020"}, {"fs.file.impl": "org.example.Evil"},
     {"spark.hadoop.fs.s3a.endpoint": "http://10.0.0.1"}, {"io.compression.codecs": "org.example.Codec"},
     {"hadoop.security.authentication": "simple"}, {"whatever": "1"}],
)  # fmt: skip
def test_settings_that_are_no_reader_option_are_refused_in_every_body(
    model: type[BaseModel], body: Any, loc: str, options: dict[str, str]
) -> None:
    where, words = _refused(model, body(options))
    assert where == loc
    named = next(k for k in options if k.lower() not in {"header"})
    assert f'"{named}" is not a reader option' in words and "the options taken: " in words, words
    assert "sep" in words or "mergeSchema" in words  # the accepted ones are listed


def test_each_format_takes_its_own_options_in_any_case() -> None:
    for fmt, names in TAKEN.items():
        for name in names:
            for given in (name, name.lower(), name.upper()):
                value = "true" if name.lower() in _SWITCHES else "x"
                DatasetCreate.model_validate({"uri": "d", "format": fmt, "options": {given: value}})
    DatasetCreate.model_validate({"uri": "d", "options": {"sep": ";", "mergeSchema": "true"}})  # format not known yet
    where, words = _refused(DatasetCreate, {"uri": "d.parquet", "format": "parquet", "options": {"sep": ";"}})
    assert where == "options" and '"sep" is not a reader option of parquet data' in words, words
    assert words.endswith("recursiveFileLookup"), words  # parquet's list, not CSV's


@pytest.mark.parametrize(
    ("options", "words"),
    [({"path": "/etc/passwd"}, "the uri says which files"), ({"BasePath": "/"}, "the uri says which files"),
     ({"sep": "\u0000"}, '"sep": an option\'s name and value may not hold a NUL'),
     ({"sep": "\ud800"}, "unpaired surrogate"), ({"sep": ";", "SEP": ","}, "sep and SEP are one option")],
)  # fmt: skip
def test_paths_nul_surrogates_and_twice_named_options_are_refused(options: dict[str, str], words: str) -> None:
    where, said = _refused(DatasetCreate, {"uri": "d.csv", "options": options})
    assert where == "options" and words in said, said


def test_a_lone_surrogate_in_any_text_field_is_a_422_naming_the_field() -> None:
    """It reached the problem's rendering, which could not encode it as UTF-8: a 500 (walkthrough F5)."""
    where, said = _refused(DatasetCreate, {"uri": "/data/\ud800"})
    assert where == "uri" and said.endswith("holds an unpaired surrogate (\\ud800 at character 7): send text as "
                                            "valid Unicode"), said  # fmt: skip
    where, said = _refused(TrainRequest, {**TRAIN, "name": "a\udfff"})
    assert where == "name" and "unpaired surrogate" in said, said
