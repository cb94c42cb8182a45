"""Evaluate, predict and keep models through the real service: one-pass evaluation that matches scikit-learn,
batch and online predictions that agree, aliases, artifacts and checkpoints."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn import metrics as skm

from tests.helpers import TAXI_FEATURES, Service, taxi_request

REPO = Path(__file__).resolve().parents[2]
MLP = {"layers": [{"type": "dense", "units": 32, "activation": "relu"},
                  {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}]}  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    test = pd.read_parquet(REPO / "datasets/digits/test.parquet")
    test.assign(id=np.arange(len(test)) + 1000).to_parquet(root / "digits-keyed.parquet")
    taxi = pd.read_parquet(REPO / "datasets/taxi/eval.parquet").head(500)
    taxi.assign(trip_id=np.arange(len(taxi))).to_parquet(root / "taxi-keyed.parquet")
    bad = test.head(40).astype({"label": "float64"})
    bad.loc[7, "label"] = np.nan  # one row the evaluation finds bad
    bad.to_parquet(root / "digits-bad.parquet")
    return root


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory, data: Path) -> Iterator[Service]:
    from tests.helpers import running_service

    with running_service(spark, tmp_path_factory.mktemp("svc"), data_roots=[data, REPO / "datasets"]) as service:
        yield service


@pytest.fixture(scope="module")
def digits_model(svc: Service) -> dict[str, Any]:
    body = {
        "name": "digits-mlp",
        "framework": "torch",
        "dataset": {"uri": "digits/train.parquet", "features": ["pixels"], "label": "label",
                    "task": "classification", "num_classes": 10, "normalize": "image"},
        "validation": {"uri": "digits/test.parquet"},
        "network": MLP,
        "training": {"epochs": 3, "batch_size_per_worker": 32, "num_workers": 2,
                     "optimizer": {"type": "adam", "learning_rate": 0.003}},
    }  # fmt: skip
    return svc.done("/train", body)


def test_evaluation_matches_sklearn_in_one_pass(svc: Service, digits_model: dict[str, Any]) -> None:
    assert svc.client.put("/models/digits-mlp/aliases/champion", json={"version": 1}).json()["version"] == 1
    evaluation = svc.done("/evaluate", {
        "model": {"name": "digits-mlp", "alias": "champion"},
        "dataset": {"uri": "digits-keyed.parquet"},
        "metrics": ["classification", "roc"],
        "exact_auc": True,
    })  # fmt: skip
    result = evaluation["result"]
    assert evaluation["model"] == {"name": "digits-mlp", "version": 1}
    tracker = svc.runtime.spark.sparkContext.statusTracker()
    names = [tracker.getStageInfo(st).name for j in tracker.getJobIdsForGroup(evaluation["id"])
             for st in tracker.getJobInfo(j).stageIds]  # fmt: skip
    scans = [n for n in names if not n.startswith("load at")]  # "load" jobs read parquet footers (the schema)
    assert len(scans) == 1 and "evaluation/driver.py" in scans[0], names

    batch = svc.done("/predict", {"model": {"name": "digits-mlp"}, "dataset": {"uri": "digits-keyed.parquet",
                                                                                    "key": "id"}})  # fmt: skip
    out = pd.read_parquet(batch["result"]["output_uri"]).sort_values("id")
    truth = pd.read_parquet(svc.runtime.settings.data_roots[0] / "digits-keyed.parquet").sort_values("id")
    assert batch["result"]["rows"] == len(truth) == len(out)
    assert list(out["id"]) == list(truth["id"])
    y, predicted = truth["label"].to_numpy(), out["prediction"].to_numpy()
    probabilities = np.stack(out["probabilities"].to_numpy())
    classification = result["classification"]
    assert classification["accuracy"] == pytest.approx(skm.accuracy_score(y, predicted), abs=1e-9)
    assert classification["confusion_matrix"] == skm.confusion_matrix(y, predicted, labels=range(10)).tolist()
    precision, recall, f1, _ = skm.precision_recall_fscore_support(y, predicted, labels=range(10), zero_division=0)
    np.testing.assert_allclose(classification["precision"], precision, atol=1e-9)
    np.testing.assert_allclose(classification["recall"], recall, atol=1e-9)
    np.testing.assert_allclose(classification["f1"], f1, atol=1e-9)
    assert classification["macro"]["f1"] == pytest.approx(skm.f1_score(y, predicted, average="macro"), abs=1e-9)
    auc = skm.roc_auc_score(y, probabilities, multi_class="ovr", average="macro", labels=range(10))
    assert result["roc"]["macro_auc"] == pytest.approx(auc, abs=1e-6)

    # online prediction of the same rows gives the same numbers
    rows = [{"pixels": list(map(float, p))} for p in truth["pixels"].head(20)]
    online = svc.client.post("/predict", json={"model": {"name": "digits-mlp"}, "dataframe_records": rows})
    assert online.status_code == 200, online.text
    np.testing.assert_allclose(online.json()["probabilities"], probabilities[:20], rtol=1e-6, atol=1e-7)
    assert online.json()["predictions"] == predicted[:20].tolist()
    split = svc.client.post("/predict", json={
        "model": {"name": "digits-mlp", "version": 1},
        "dataframe_split": {"columns": ["pixels"], "data": [[list(map(float, p))] for p in truth["pixels"].head(3)]},
    })  # fmt: skip
    assert split.json()["predictions"] == predicted[:3].tolist()
    instances = svc.client.post("/predict", json={
        "model": {"name": "digits-mlp"}, "instances": [list(map(float, p)) for p in truth["pixels"].head(3)],
    })  # fmt: skip
    assert instances.json()["predictions"] == predicted[:3].tolist()


def test_an_evaluation_that_fails_on_bad_rows_shows_the_first_ones(svc: Service, digits_model: dict[str, Any]) -> None:
    """An evaluation's BAD_ROWS said how many rows were bad and showed none (a training job's shows the first
    ones with the reason of each): it shows them now, as JSON."""
    answer = svc.client.post(
        "/evaluate", json={"model": {"name": "digits-mlp"}, "dataset": {"uri": "digits-bad.parquet"}}
    )
    assert answer.status_code == 202, answer.text
    failed = svc.wait(answer.json()["id"], {"SUCCEEDED", "FAILED"}, timeout=600)
    assert failed["error"]["reason"] == "BAD_ROWS", failed["error"]
    message = failed["error"]["message"]
    assert message.startswith("1 of 40 rows"), message
    shown, _ = json.JSONDecoder().raw_decode(message.split("first ones: ", 1)[1])
    assert [row["reason"] for row in shown] == ["label is null"], message
    assert shown[0]["pixels"].startswith("[64 values: "), shown


def test_downloaded_artifact_loads_without_sparktrain(svc: Service, digits_model: dict[str, Any],
                                                     tmp_path: Path) -> None:  # fmt: skip
    import json
    import subprocess
    import sys

    response = svc.client.get("/models/digits-mlp/versions/1/artifact")
    assert response.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:gz") as tar:
        tar.extractall(tmp_path, filter="data")
    model_dir = tmp_path / "digits-mlp-v1"
    names = {p.name for p in model_dir.iterdir()}
    assert {"spec.json", "weights.safetensors", "metrics.json", "sparktrain_model.py", "README.txt"} <= names
    pixels = pd.read_parquet(REPO / "datasets/digits/test.parquet")["pixels"].head(5)
    rows = [list(map(float, p)) for p in pixels]
    code = (
        "import json, sys; import sparktrain_model as m; model = m.load('.');"
        f"out = model.predict({rows!r}); print(json.dumps(out));"
        "assert 'workers' not in sys.modules and 'app' not in sys.modules"
    )
    run = subprocess.run([sys.executable, "-c", code], check=False, cwd=model_dir, env={"PYTHONPATH": str(model_dir)},
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 0, run.stderr
    standalone = json.loads(run.stdout)
    online = svc.client.post("/predict", json={"model": {"name": "digits-mlp"}, "instances": rows}).json()
    np.testing.assert_allclose(standalone["probabilities"], online["probabilities"], rtol=1e-6, atol=1e-7)


def test_checkpoints_serve_evaluation_and_download(svc: Service, digits_model: dict[str, Any]) -> None:
    checkpoint = svc.client.get(f"/jobs/{digits_model['id']}/checkpoints").json()["checkpoints"][0]
    evaluation = svc.done("/evaluate", {"model": {"checkpoint": checkpoint["id"]},
                                           "dataset": {"uri": "digits/test.parquet"}})  # fmt: skip
    assert evaluation["result"]["classification"]["count"] == 360
    archive = svc.client.get(f"/checkpoints/{checkpoint['id']}/artifact")
    with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
        names = tar.getnames()
    assert any(n.endswith("rank-1.safetensors") for n in names) and any(n.endswith("meta.json") for n in names)


def test_spark_ml_regression_evaluate_and_predict(svc: Service) -> None:
    model = svc.done("/train", taxi_request("taxi-rf", algorithm="random_forest", numTrees=10, maxDepth=6))
    evaluation = svc.done("/evaluate", {"model": {"name": "taxi-rf"}, "dataset": {"uri": "taxi-keyed.parquet"}})
    batch = svc.done("/predict", {"model": {"name": "taxi-rf"},
                                     "dataset": {"uri": "taxi-keyed.parquet", "key": "trip_id"}})  # fmt: skip
    out = pd.read_parquet(batch["result"]["output_uri"]).sort_values("trip_id")
    truth = pd.read_parquet(svc.runtime.settings.data_roots[0] / "taxi-keyed.parquet").sort_values("trip_id")
    regression = evaluation["result"]["regression"]["columns"]["fare_amount"]
    y, p = truth["fare_amount"].to_numpy(), out["prediction"].to_numpy()
    assert regression["mse"] == pytest.approx(skm.mean_squared_error(y, p), rel=1e-9)
    assert regression["mae"] == pytest.approx(skm.mean_absolute_error(y, p), rel=1e-9)
    assert regression["r2"] == pytest.approx(skm.r2_score(y, p), rel=1e-9)
    row = truth[TAXI_FEATURES].head(2).to_dict(orient="records")
    online = svc.client.post("/predict", json={"model": {"name": "taxi-rf"}, "dataframe_records": row})
    np.testing.assert_allclose(online.json()["predictions"], p[:2], rtol=1e-9)
    assert model["model"] == {"name": "taxi-rf", "version": 1}

    # the version's files removed: the cached model still answers online (docs/inference.md says so), and a batch
    # job names the missing files (it failed as a SPARK_ERROR with a traceback of loading the model)
    import shutil

    from workers.storage import local_path

    shutil.rmtree(local_path(svc.client.get("/models/taxi-rf/versions/1").json()["artifact_uri"]))
    again = svc.client.post("/predict", json={"model": {"name": "taxi-rf"}, "dataframe_records": row})
    assert again.status_code == 200 and again.json()["predictions"] == online.json()["predictions"]
    batch = svc.client.post("/predict", json={"model": {"name": "taxi-rf"},
                                              "dataset": {"uri": "taxi-keyed.parquet", "key": "trip_id"}})  # fmt: skip
    assert batch.status_code == 202, batch.text
    failed = svc.wait(batch.json()["id"], {"SUCCEEDED", "FAILED"})
    assert failed["error"]["reason"] == "MODEL_FILES_MISSING", failed["error"]
    assert failed["error"]["message"].startswith("the files of taxi-rf version 1 are missing: "), failed["error"]
    assert "is gone (removed or moved since it was registered; it needs metadata, stages)" in failed["error"]["message"]
    evaluated = svc.client.post(
        "/evaluate", json={"model": {"name": "taxi-rf"}, "dataset": {"uri": "taxi-keyed.parquet"}}
    )
    assert evaluated.status_code == 202, evaluated.text
    failed = svc.wait(evaluated.json()["id"], {"SUCCEEDED", "FAILED"})
    assert failed["error"]["reason"] == "MODEL_FILES_MISSING", failed["error"]  # (the evaluation's was a traceback)


def _problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return dict(response.json())


def test_bad_inference_requests(svc: Service, digits_model: dict[str, Any]) -> None:
    post = svc.client.post
    assert "No model" in _problem(post("/predict", json={"model": {"name": "nope"}, "instances": [[1]]}), 404)["detail"]
    _problem(post("/predict", json={"model": {"name": "digits-mlp", "version": 9}, "instances": [[1]]}), 404)
    assert (
        "no alias"
        in _problem(
            post("/evaluate", json={"model": {"name": "digits-mlp", "alias": "gone"}, "dataset": {"uri": "x"}}), 404
        )["detail"]
    )
    missing = _problem(post("/predict", json={"model": {"name": "digits-mlp"}, "dataframe_records": [{"x": 1}]}), 422)
    assert "missing features ['pixels']" in missing["detail"]
    short = _problem(post("/predict", json={"model": {"name": "digits-mlp"}, "instances": [[1.0, 2.0]]}), 422)
    assert "64" in short["detail"]
    typed = _problem(post("/predict", json={"model": {"name": "digits-mlp"}, "instances": [["a"] * 64]}), 422)
    assert "numbers" in typed["detail"]
    nan = _problem(post("/predict", json={"model": {"name": "digits-mlp"}, "instances": [[None] * 64]}), 422)
    assert "NaN" in nan["detail"]
    too_many = post("/predict", json={"model": {"name": "digits-mlp"}, "instances": [[0.0] * 64] * 10_001})
    assert "dataset" in _problem(too_many, 413)["detail"]
    no_key = post("/predict", json={"model": {"name": "digits-mlp"}, "dataset": {"uri": "digits/test.parquet"}})
    assert _problem(no_key, 422)["errors"][0]["loc"] == "dataset.key"
    wrong_group = post("/evaluate", json={"model": {"name": "digits-mlp"}, "dataset": {"uri": "digits/test.parquet"},
                                          "metrics": ["regression"]})  # fmt: skip
    assert "do not fit" in _problem(wrong_group, 422)["detail"]
    regression = {"uri": "digits/test.parquet", "task": "regression"}
    wrong_task = post("/evaluate", json={"model": {"name": "digits-mlp"}, "dataset": regression})
    problem = _problem(wrong_task, 422)  # the model's task replaced it without a word (bad-input walkthrough)
    assert problem["errors"][0]["loc"] == "dataset.task" and "a classification model" in problem["detail"], problem
    for field, value, says in (("normalize", "minmax", "normalizer applies"), ("split", {"validation_fraction": 0.2},
                                                                               "a split is for training")):  # fmt: skip
        extra = {"uri": "digits/test.parquet", field: value}  # a training job's fields, ignored without a word
        for path, body in (("/evaluate", {}), ("/predict", {"dataset": {**extra, "key": "label"}})):
            problem = _problem(post(path, json={"model": {"name": "digits-mlp"}, "dataset": extra, **body}), 422)
            assert problem["errors"][0]["loc"] == f"dataset.{field}" and says in problem["detail"], problem
    both = post("/predict", json={"model": {"name": "digits-mlp"}, "instances": [[0.0] * 64],
                                  "dataset": {"uri": "digits/test.parquet", "key": "label"}})  # fmt: skip
    _problem(both, 422)
    assert svc.client.put("/models/digits-mlp/aliases/latest", json={"version": 1}).status_code == 422
    assert svc.client.delete("/models/digits-mlp/aliases/none").status_code == 404


def test_v2_protocol_with_tritonclient(svc: Service, digits_model: dict[str, Any]) -> None:
    """An existing V2 client (Triton's HTTP client) works unchanged against /v2."""
    import tritonclient.http as triton
    from tritonclient.utils import InferenceServerException

    client = triton.InferenceServerClient(url=svc.url.removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("digits-mlp")
    metadata = client.get_model_metadata("digits-mlp")
    assert metadata["versions"] == ["1"] and metadata["inputs"][0]["shape"] == [-1, 64]
    pixels = np.stack(pd.read_parquet(REPO / "datasets/digits/test.parquet")["pixels"].head(4).to_numpy())
    tensor = triton.InferInput("input", list(pixels.shape), "FP32")
    tensor.set_data_from_numpy(pixels.astype(np.float32))
    result = client.infer("digits-mlp", [tensor], model_version="1")
    online = svc.client.post("/predict", json={"model": {"name": "digits-mlp"},
                                               "instances": pixels.tolist()}).json()  # fmt: skip
    assert result.as_numpy("predictions").tolist() == online["class_index"]
    np.testing.assert_allclose(result.as_numpy("probabilities"), online["probabilities"], rtol=1e-6)
    with pytest.raises(InferenceServerException, match="No model"):
        client.infer("no-such-model", [tensor])


def test_predicting_with_a_model_still_training_is_a_conflict(svc: Service) -> None:
    body = {
        "name": "not-yet",
        "framework": "torch",
        "dataset": {"uri": "digits/train.parquet", "features": ["pixels"], "label": "label",
                    "task": "classification", "num_classes": 10},
        "network": MLP,
        "training": {"epochs": 200, "batch_size_per_worker": 32, "num_workers": 2},
    }  # fmt: skip
    job = svc.train(body)
    response = svc.client.post("/predict", json={"model": {"name": "not-yet"}, "instances": [[0.0] * 64]})
    assert _problem(response, 409)["job_id"] == job["id"]
    assert svc.client.post(f"/jobs/{job['id']}/cancel").status_code == 202
    svc.wait(job["id"], {"CANCELLED", "FAILED", "SUCCEEDED"}, timeout=120)
