"""Evaluation and prediction of sequence (lstm/gru) models through the real service: the data is read as the model
was trained on it, metrics equal scikit-learn's on the batch predictions, and online predictions equal batch."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn import metrics as skm

from tests.helpers import Service

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Per-step labels in the arrays layout: one row per sequence, ``v`` its steps, ``label`` one class per step
    (whether the running sum is positive); lengths 3..9."""
    root = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(11)
    rows = []
    for sid in range(240):
        v = rng.normal(size=int(rng.integers(3, 10)))
        rows.append({"sid": f"s{sid:03d}", "v": v.tolist(), "label": (np.cumsum(v) > 0).astype(int).tolist()})
    frame = pd.DataFrame(rows)
    frame.iloc[:180].to_parquet(root / "steps-train.parquet")
    frame.iloc[180:].to_parquet(root / "steps-test.parquet")
    # Prediction data has no labels at all.
    frame.iloc[180:].drop(columns=["label"]).to_parquet(root / "steps-unlabelled.parquet")
    return root


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory, data: Path) -> Iterator[Service]:
    from tests.helpers import running_service

    with running_service(spark, tmp_path_factory.mktemp("svc"), data_roots=[data, REPO / "datasets"]) as service:
        yield service


def _batch(svc: Service, body: dict[str, Any]) -> pd.DataFrame:
    job = svc.done("/predict", body)
    return pd.read_parquet(job["result"]["output_uri"])


def test_last_step_model_evaluates_and_predicts(svc: Service, tmp_path: Path) -> None:
    """The shipped sequences (rows layout, one label per sequence: the label of its last step)."""
    svc.done("/train", {
        "name": "seq-last",
        "framework": "torch",
        "dataset": {"uri": "sequences/train.parquet", "features": ["f0", "f1", "f2"], "label": "label",
                    "task": "classification", "num_classes": 3,
                    "sequence": {"layout": "rows", "labels": "last_step", "alignment": "ALIGN_END"}},
        "network": {"layers": [{"type": "lstm", "units": 16},
                               {"type": "output", "units": 3, "activation": "softmax", "loss": "cross_entropy"}]},
        "training": {"epochs": 3, "batch_size_per_worker": 32, "num_workers": 2,
                     "optimizer": {"type": "adam", "learning_rate": 0.01}},
    })  # fmt: skip
    evaluation = svc.done("/evaluate", {
        "model": {"name": "seq-last"}, "dataset": {"uri": "sequences/test.parquet"},
        "metrics": ["classification", "roc"], "exact_auc": True,
    })["result"]  # fmt: skip
    assert evaluation["rows"] == 200 and evaluation["bad_rows"] == 0

    out = _batch(svc, {"model": {"name": "seq-last"}, "dataset": {"uri": "sequences/test.parquet"}})
    steps = pd.read_parquet(REPO / "datasets/sequences/test.parquet").sort_values(["sequence_id", "step"])
    truth = steps.groupby("sequence_id")["label"].last()
    assert sorted(out["sequence_id"]) == sorted(truth.index)
    out = out.set_index("sequence_id").loc[truth.index]
    probabilities = np.stack(out["probabilities"].to_numpy())
    assert list(out["prediction"]) == list(probabilities.argmax(axis=1))
    classification = evaluation["classification"]
    assert classification["accuracy"] == pytest.approx(skm.accuracy_score(truth, out["prediction"]), abs=1e-9)
    assert classification["macro"]["f1"] == pytest.approx(
        skm.f1_score(truth, out["prediction"], average="macro", zero_division=0), abs=1e-9
    )
    auc = skm.roc_auc_score(truth, probabilities, multi_class="ovr", average="macro", labels=range(3))
    assert evaluation["roc"]["macro_auc"] == pytest.approx(auc, abs=1e-6)

    # Online: each instance is one sequence, a list of steps of [f0, f1, f2].
    ids = list(truth.index[:5])
    instances = [steps[steps.sequence_id == sid][["f0", "f1", "f2"]].to_numpy().tolist() for sid in ids]
    online = svc.client.post("/predict", json={"model": {"name": "seq-last"}, "instances": instances})
    assert online.status_code == 200, online.text
    np.testing.assert_allclose(np.array(online.json()["probabilities"]), probabilities[:5], rtol=0, atol=1e-6)
    assert online.json()["class_index"] == list(out["prediction"][:5])

    # V2: one rectangular [batch, steps, features] tensor (sequences of equal length).
    same = [seq for seq in instances if len(seq) == len(instances[0])][:1] * 2
    v2 = svc.client.post(
        "/v2/models/seq-last/infer",
        json={
            "inputs": [
                {"name": "input", "shape": [2, len(same[0]), 3], "datatype": "FP32", "data": np.ravel(same).tolist()}
            ]
        },
    )
    assert v2.status_code == 200, v2.text
    tensors = {t["name"]: t for t in v2.json()["outputs"]}
    assert tensors["probabilities"]["shape"] == [2, 3]
    np.testing.assert_allclose(np.reshape(tensors["probabilities"]["data"], (2, 3))[0], probabilities[0], atol=1e-6)
    meta = svc.client.get("/v2/models/seq-last").json()
    assert meta["inputs"][0]["shape"] == [-1, -1, 3]
    wrong = svc.client.post(
        "/v2/models/seq-last/infer",
        json={"inputs": [{"name": "input", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]},
    )
    assert wrong.status_code == 422 and "[batch, steps, 3]" in wrong.text, wrong.text

    # The downloaded archive, loaded with plain torch and safetensors, gives the same outputs.
    archive = svc.client.get("/models/seq-last/versions/1/artifact")
    assert archive.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
        tar.extractall(tmp_path, filter="data")
    code = f"import json, sparktrain_model as m; model = m.load('.');print(json.dumps(model.predict({instances!r})))"
    run = subprocess.run([sys.executable, "-c", code], check=False, cwd=tmp_path / "seq-last-v1",
                         env={"PYTHONPATH": str(tmp_path / "seq-last-v1")}, capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(json.loads(run.stdout)["probabilities"], probabilities[:5], rtol=0, atol=1e-6)


def test_per_step_model_evaluates_and_predicts(svc: Service) -> None:
    """The arrays layout with a label per step: metrics over every labelled step, predictions per step."""
    sequence = {"layout": "arrays", "sequence_id": "sid", "labels": "per_step", "alignment": "ALIGN_START"}
    svc.done("/train", {
        "name": "seq-steps",
        "framework": "torch",
        "dataset": {"uri": "steps-train.parquet", "features": ["v"], "label": "label", "task": "classification",
                    "num_classes": 2, "sequence": sequence},
        "network": {"input_shape": [9, 1],
                    "layers": [{"type": "gru", "units": 8, "return_sequences": True},
                               {"type": "output", "units": 2, "activation": "softmax", "loss": "cross_entropy"}]},
        "training": {"epochs": 3, "batch_size_per_worker": 16, "num_workers": 2,
                     "optimizer": {"type": "adam", "learning_rate": 0.02}},
    })  # fmt: skip
    evaluation = svc.done("/evaluate", {"model": {"name": "seq-steps"}, "dataset": {"uri": "steps-test.parquet"},
                                          "metrics": ["classification"]})["result"]  # fmt: skip
    assert evaluation["rows"] == 60

    out = _batch(svc, {"model": {"name": "seq-steps"}, "dataset": {"uri": "steps-unlabelled.parquet", "key": "sid"}})
    test = pd.read_parquet(svc.runtime.settings.data_roots[0] / "steps-test.parquet").set_index("sid")
    out = out.set_index("sid").loc[test.index]
    assert [len(p) for p in out["prediction"]] == [len(v) for v in test["v"]]  # one prediction per real step
    predicted = np.concatenate(out["prediction"].to_numpy())
    truth = np.concatenate(test["label"].to_numpy())
    assert evaluation["classification"]["accuracy"] == pytest.approx(skm.accuracy_score(truth, predicted), abs=1e-9)
    matrix = evaluation["classification"]["confusion_matrix"]
    assert matrix == skm.confusion_matrix(truth, predicted, labels=[0, 1]).tolist()

    # Online, as records mapping the feature to its per-step values: the same per-step answers.
    records = [{"v": list(v)} for v in test["v"][:4]]
    online = svc.client.post("/predict", json={"model": {"name": "seq-steps"}, "dataframe_records": records})
    assert online.status_code == 200, online.text
    assert online.json()["class_index"] == [list(p) for p in out["prediction"][:4]]
    for got, want in zip(online.json()["probabilities"], out["probabilities"][:4], strict=True):
        np.testing.assert_allclose(np.array(got), np.stack(want), rtol=0, atol=1e-6)


def test_bad_sequence_requests(svc: Service) -> None:
    """A key other than the sequence id, and malformed online sequences, are 422s that say what to send."""
    response = svc.client.post(
        "/predict", json={"model": {"name": "seq-steps"}, "dataset": {"uri": "steps-test.parquet", "key": "v"}}
    )
    assert response.status_code == 422 and "the key is the sequence id column 'sid'" in response.text, response.text
    response = svc.client.post("/predict", json={"model": {"name": "seq-last"}, "instances": [[[1.0, 2.0]]]})
    assert response.status_code == 422 and "each step needs 3 numbers" in response.text, response.text
    response = svc.client.post("/predict", json={"model": {"name": "seq-last"}, "instances": [[]]})
    assert response.status_code == 422 and "non-empty list of steps" in response.text, response.text
    response = svc.client.post("/predict", json={"model": {"name": "seq-last"}, "instances": [[[1.0, None, 2.0]]]})
    assert response.status_code == 422 and "NaN" in response.text, response.text
