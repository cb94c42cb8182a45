"""``training.resume_from`` for xgboost through the real service, two cases tests/e2e/test_xgboost_resume_from.py
leaves out: validation data overwritten in place between the jobs (same path, other rows: early stopping's carried
best score would be compared against another set, so it starts afresh and the log says why; it was carried), and a
text-label classification continued on data holding only some of the checkpoint's classes."""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.helpers import TAXI_FEATURES, Service, running_service
from workers import storage

REPO = Path(__file__).resolve().parents[2]
RATE_NAMES = {1: "standard", 2: "jfk", 3: "newark", 5: "negotiated"}
EARLY = {"learning_rate": 0.3, "max_depth": 3, "num_workers": 1, "early_stopping_rounds": 3}
AFRESH = "params.early_stopping_rounds counts from this job's first round"


def rows(seed: int, count: int) -> pd.DataFrame:
    """``y = 3 x1 - 2 x2 + noise``; every value written with 4 decimals in [1, 10): files of one row count have
    the same size whatever the seed (an overwrite is told by its modification time alone)."""
    rng = np.random.default_rng(seed)
    x1, x2 = rng.uniform(1, 3, count), rng.uniform(1, 2, count)
    y = np.clip(3 * x1 - 2 * x2 + rng.normal(0, 0.3, count) + 2, 1, 9.9999)
    return pd.DataFrame({"x1": x1, "x2": x2, "y": y})


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    frame.to_csv(path, index=False, float_format="%.4f")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("data")
    write_csv(data / "fit.csv", rows(1, 600))
    write_csv(data / "check.csv", rows(2, 200))
    write_csv(data / "whole.csv", rows(3, 600))
    for part in ("train", "eval"):
        taxi = pd.read_parquet(REPO / "datasets" / "taxi" / f"{part}.parquet")
        taxi.assign(rate_name=taxi["rate_code"].map(RATE_NAMES)).to_parquet(data / f"taxi-{part}.parquet")
    train = pd.read_parquet(data / "taxi-train.parquet")
    train[train["rate_name"] != "negotiated"].to_parquet(data / "taxi-no-negotiated.parquet")
    return data


@pytest.fixture(scope="module")
def svc(spark: Any, data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(spark, tmp_path_factory.mktemp("svc"), data_roots=[data]) as s:
        yield s


def posted(svc: Service, payload: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The finished job and the warnings its 202 gave."""
    response = svc.client.post("/train", json=payload)
    assert response.status_code == 202, response.text
    job = svc.wait(response.json()["id"], {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED", job["error"]
    return job, list(response.json()["warnings"])


def logged(svc: Service, job_id: str) -> list[str]:
    return [line["message"] for line in svc.client.get(f"/jobs/{job_id}/logs").json()["lines"]]


def checkpoint(svc: Service, job_id: str, rounds: int) -> dict[str, Any]:
    listed = svc.client.get(f"/jobs/{job_id}/checkpoints").json()["checkpoints"]
    return next(c for c in listed if c["epoch"] == rounds)


def xy(name: str, params: dict[str, Any], resume_from: str | None = None, validation: str | None = None,
       uri: str = "fit.csv") -> dict[str, Any]:  # fmt: skip
    dataset = {"uri": uri, "features": ["x1", "x2"], "label": "y", "task": "regression"}
    out: dict[str, Any] = {"name": name, "framework": "xgboost", "params": params, "dataset": dataset}
    if validation is not None:
        out["validation"] = {"uri": validation}
    if resume_from is not None:
        out["training"] = {"resume_from": resume_from}
    return out


def rewrite(path: Path, frame: pd.DataFrame) -> None:
    """Other rows at the same path; its modification time surely another (a coarse clock could repeat it)."""
    before = path.stat()
    write_csv(path, frame)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))


def test_early_stopping_starts_afresh_when_the_validation_data_changed_in_place(svc: Service, data: Path) -> None:
    validation = {"validation": "check.csv"}
    first, _ = posted(svc, xy("fp-source", {**EARLY, "num_round": 10, "checkpoint_rounds": 5}, **validation))
    point = checkpoint(svc, first["id"], 10)
    card = json.loads((storage.fetch_dir(point["uri"]) / "card.json").read_text())
    assert card["validation_data"]["files"] == 1, card  # the fingerprint of check.csv, as the fit started
    assert card["validation_data"]["bytes"] == (data / "check.csv").stat().st_size, card

    # the same file, untouched: the checkpoint's best score goes on
    same, warnings = posted(svc, xy("fp-same", {**EARLY, "num_round": 14}, point["id"], **validation))
    assert not [w for w in warnings if w.startswith(AFRESH)], warnings
    assert not [line for line in logged(svc, same["id"]) if "early stopping counts from" in line]
    assert same["result"]["rounds"]["resumed_from"] == 10

    # other rows of the same shape written over it: the same path, the same size, another modification time
    size = (data / "check.csv").stat().st_size
    rewrite(data / "check.csv", rows(4, 200))
    assert (data / "check.csv").stat().st_size == size
    changed, warnings = posted(svc, xy("fp-changed", {**EARLY, "num_round": 14}, point["id"], **validation))
    said = f"{AFRESH}: the validation data changed since checkpoint {point['id']!r} was written ("
    (warning,) = [w for w in warnings if w.startswith(AFRESH)]
    assert warning.startswith(said) and "its files have other modification times" in warning, warning
    lines = logged(svc, changed["id"])
    assert any("the validation data changed since" in line for line in lines), lines
    assert any("early stopping counts from this job's first round" in line for line in lines), lines
    assert changed["result"]["rounds"]["resumed_from"] == 10

    # held out of the training data (no validation set): that file's fingerprint; here rewritten with more rows
    whole = xy("fp-whole", {**EARLY, "num_round": 10, "checkpoint_rounds": 5}, uri="whole.csv")
    held = checkpoint(svc, posted(svc, whole)[0]["id"], 10)
    rewrite(data / "whole.csv", rows(5, 700))
    on, warnings = posted(svc, xy("fp-whole-on", {**EARLY, "num_round": 14}, held["id"], uri="whole.csv"))
    (warning,) = [w for w in warnings if w.startswith(AFRESH)]
    assert "whole.csv holds 1 file of" in warning and "bytes now, 1 file of" in warning, warning
    assert any("the validation data changed since" in line for line in logged(svc, on["id"]))


@pytest.mark.parametrize("workers", [1, 2])
def test_text_labels_lacking_some_of_the_checkpoints_classes_continue_it(
    svc: Service, data: Path, workers: int
) -> None:
    """A checkpoint of the 4 rate names goes on with a month without "negotiated" rides: the model keeps its 4
    classes in the checkpoint's order (one worker: xgboost's own API; two: xgboost.spark)."""
    params = {"learning_rate": 0.3, "max_depth": 4, "num_workers": workers}
    names = {"features": [f for f in TAXI_FEATURES if f != "rate_code"], "label": "rate_name",
             "task": "classification"}  # fmt: skip
    source = {"name": f"names-{workers}", "framework": "xgboost", "params": {**params, "num_round": 4,
              "checkpoint_rounds": 2}, "dataset": {"uri": "taxi-train.parquet", **names},
              "validation": {"uri": "taxi-eval.parquet"}}  # fmt: skip
    first, _ = posted(svc, source)
    point = checkpoint(svc, first["id"], 2)
    on = {**source, "name": f"names-{workers}-on", "params": {**params, "num_round": 6}, "training":
          {"resume_from": point["id"]}, "dataset": {"uri": "taxi-no-negotiated.parquet", **names}}  # fmt: skip
    job, warnings = posted(svc, on)
    assert any("has no rows of ['negotiated'] of the 4 classes" in w for w in warnings), warnings
    assert job["result"]["rounds"] == {"requested": 6, "trained": 6, "kept": 6, "resumed_from": 2}
    before, after = card(svc, f"names-{workers}"), card(svc, f"names-{workers}-on")
    assert after["class_labels"] == before["class_labels"] and len(after["class_labels"]) == 4, after
    assert after["num_classes"] == 4 and "negotiated" in after["class_labels"]

    # it predicts all 4 names: a "negotiated" ride of the evaluation month gets one of them
    evaluation = pd.read_parquet(data / "taxi-eval.parquet")
    import xgboost

    probabilities = model(svc, f"names-{workers}-on").predict(xgboost.DMatrix(evaluation[names["features"]]))
    assert probabilities.shape == (len(evaluation), 4)


def _archive(svc: Service, name: str) -> dict[str, bytes]:
    archive = svc.client.get(f"/models/{name}/versions/1/artifact")
    assert archive.status_code == 200, archive.text
    with tarfile.open(fileobj=io.BytesIO(archive.content)) as tar:
        out = {}
        for file in ("model.json", "card.json"):
            extracted = tar.extractfile(f"{name}-v1/{file}")
            assert extracted is not None
            out[file] = extracted.read()
        return out


def card(svc: Service, name: str) -> dict[str, Any]:
    return dict(json.loads(_archive(svc, name)["card.json"]))


def model(svc: Service, name: str) -> Any:
    import xgboost

    return xgboost.Booster(model_file=bytearray(_archive(svc, name)["model.json"]))
