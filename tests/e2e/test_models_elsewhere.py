"""Models that travel, through the real service: every family's version downloaded as an MLflow model directory
and loaded in an environment without sparktrain (``mlflow.pyfunc.load_model``, ``mlflow models serve``) answers
what ``POST /predict`` answers; a torch network downloaded as ONNX answers the same under onnxruntime."""

from __future__ import annotations

import io
import json
import subprocess
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

from tests import mlflow_env
from tests.helpers import Service, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]  # training and first ONNX exports on a shared machine
REPO = Path(__file__).resolve().parents[2]
TAXI = ["passenger_count", "trip_distance", "hour", "day_of_week", "h_distance"]
ADAM = {"type": "adam", "learning_rate": 0.01}
TRAINING = {"epochs": 1, "batch_size_per_worker": 64, "num_workers": 2, "optimizer": ADAM}


def _torch(name: str, dataset: dict[str, Any], layers: list[dict[str, Any]], **network: Any) -> dict[str, Any]:
    return {"name": name, "framework": "torch", "dataset": dataset, "network": {"layers": layers, **network},
            "training": TRAINING}  # fmt: skip


def _taxi(label: str, task: str, **extra: Any) -> dict[str, Any]:
    return {"uri": "taxi/train.parquet", "features": TAXI, "label": label, "task": task, **extra}


MODELS: dict[str, dict[str, Any]] = {
    "classifier": _torch("el-classifier", _taxi("is_weekend", "classification", num_classes=2, normalize="standardize"),
                         [{"type": "dense", "units": 8, "activation": "relu"},
                          {"type": "output", "units": 2, "activation": "softmax", "loss": "cross_entropy"}]),
    "regressor": _torch("el-regressor", _taxi("fare_amount", "regression", normalize="standardize"),
                        [{"type": "dense", "units": 8, "activation": "relu"},
                         {"type": "output", "units": 1, "activation": "identity", "loss": "mse"}]),
    "cnn": _torch("el-cnn", {"uri": "digits/train.parquet", "features": ["pixels"], "label": "label",
                             "task": "classification", "num_classes": 10, "normalize": "image"},
                  [{"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": 1, "activation": "relu"},
                   {"type": "batch_norm"}, {"type": "max_pool2d", "kernel_size": 2}, {"type": "flatten"},
                   {"type": "dropout", "rate": 0.2},
                   {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}],
                  input_shape=[1, 8, 8]),
    "sequence": _torch("el-sequence", {"uri": "sequences/train.parquet", "features": ["f0", "f1", "f2"],
                                       "label": "label", "task": "classification", "num_classes": 3,
                                       "sequence": {"layout": "rows", "labels": "last_step"}},
                       [{"type": "gru", "units": 8},
                        {"type": "output", "units": 3, "activation": "softmax", "loss": "cross_entropy"}]),
    "xgboost": {"name": "el-xgboost", "framework": "xgboost",
                "dataset": _taxi("is_weekend", "classification", num_classes=2),
                "params": {"num_round": 10, "max_depth": 3}},
    "spark_ml": {"name": "el-spark", "framework": "spark_ml", "dataset": _taxi("fare_amount", "regression"),
                 "params": {"algorithm": "linear_regression"}},
}  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    taxi = pd.read_parquet(REPO / "datasets/taxi/eval.parquet").head(200)
    taxi.assign(trip_id=np.arange(len(taxi))).to_parquet(root / "taxi-keyed.parquet")
    taxi.assign(trip_id=np.arange(len(taxi)), trip_distance=taxi["trip_distance"].astype(str)).to_parquet(
        root / "taxi-strings.parquet"
    )
    return root


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory, data: Path) -> Iterator[Service]:
    from tests.helpers import running_service

    with running_service(spark, tmp_path_factory.mktemp("svc"), data_roots=[data, REPO / "datasets"]) as service:
        yield service


@pytest.fixture(scope="module")
def trained(svc: Service) -> Callable[..., dict[str, dict[str, Any]]]:
    """Train the models a test names, once per module (a test run alone trains only what it needs)."""
    done: dict[str, dict[str, Any]] = {}

    def need(*keys: str) -> dict[str, dict[str, Any]]:
        jobs = {key: svc.train(MODELS[key]) for key in keys if key not in done}
        for key, job in jobs.items():
            done[key] = svc.wait(job["id"], {"SUCCEEDED", "FAILED"}, timeout=900)
            assert done[key]["status"] == "SUCCEEDED", (key, done[key]["error"])
        return {key: done[key] for key in keys}

    return need


@pytest.fixture(scope="module")
def venv() -> Path:
    return mlflow_env.ensure()


def _download(svc: Service, key: str, fmt: str, into: Path) -> Path:
    name = MODELS[key]["name"]
    response = svc.client.get(f"/models/{name}/versions/1/artifact", params={"format": fmt}, timeout=900)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        archive.extractall(into)
    return into / (f"{name}-v1" if fmt == "mlflow" else f"{name}-v1-onnx")


def _rows(key: str) -> tuple[list[str], list[list[Any]]]:
    if key == "cnn":
        pixels = pd.read_parquet(REPO / "datasets/digits/test.parquet")["pixels"].head(12)
        return ["pixels"], [[list(map(float, p))] for p in pixels]
    taxi = pd.read_parquet(REPO / "datasets/taxi/eval.parquet").head(25)
    return TAXI, [list(row) for row in taxi[TAXI].itertuples(index=False)]  # ints stay ints


def _sequences(n: int = 6, steps: int = 5) -> list[list[list[float]]]:
    """Equal-length sequences (an MLflow tensor is rectangular), the first steps of the test data's sequences."""
    frame = pd.read_parquet(REPO / "datasets/sequences/test.parquet").sort_values(["sequence_id", "step"])
    groups = [g[["f0", "f1", "f2"]].to_numpy()[:steps] for _, g in frame.groupby("sequence_id")]
    return [g.tolist() for g in groups if len(g) == steps][:n]


def _online(svc: Service, key: str) -> dict[str, Any]:
    name = MODELS[key]["name"]
    if key == "sequence":
        body: dict[str, Any] = {"model": {"name": name}, "instances": _sequences()}
    else:
        columns, rows = _rows(key)
        body = {"model": {"name": name}, "dataframe_split": {"columns": columns, "data": rows}}
    response = svc.client.post("/predict", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_every_family_loads_in_mlflow_without_sparktrain(svc: Service, trained: Any, venv: Path,
                                                          tmp_path: Path) -> None:  # fmt: skip
    trained(*MODELS)
    jobs = []
    for key in MODELS:
        directory = _download(svc, key, "mlflow", tmp_path / key)
        assert {"MLmodel", "requirements.txt", "python_env.yaml", "conda.yaml", "input_example.json"} <= {
            p.name for p in directory.iterdir()
        }
        if key == "sequence":
            jobs.append({"dir": str(directory), "tensor": _sequences()})
        else:
            columns, rows = _rows(key)
            jobs.append({"dir": str(directory), "columns": columns, "data": rows})
    requirements = (tmp_path / "classifier" / "el-classifier-v1" / "requirements.txt").read_text().split()
    assert "torch==2.13.0" in requirements and any(r.startswith("safetensors==") for r in requirements)
    assert "pyspark==4.3.0" in (tmp_path / "spark_ml" / "el-spark-v1" / "requirements.txt").read_text().split()
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    run = subprocess.run(
        [str(venv / "bin" / "python"), str(Path(__file__).with_name("mlflow_side.py")), str(tmp_path / "jobs.json"),
         str(tmp_path / "out.json")],
        env=mlflow_env.clean_env(venv), capture_output=True, text=True, timeout=900, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    answers = dict(zip(MODELS, json.loads((tmp_path / "out.json").read_text()), strict=True))

    for key in ("classifier", "cnn", "sequence"):  # sparktrain's own loader: the /predict answer, columns by name
        online, mine = _online(svc, key), answers[key]["columns"]
        assert mine["prediction"] == online["predictions"] and mine["class_index"] == online["class_index"], key
        np.testing.assert_allclose(mine["probabilities"], online["probabilities"], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(answers["regressor"]["values"], _online(svc, "regressor")["predictions"], rtol=1e-6)
    # MLflow's own flavors: the booster's P(class 1) and the pipeline's prediction column, exactly
    assert answers["xgboost"]["values"] == [p[1] for p in _online(svc, "xgboost")["probabilities"]]
    assert answers["spark_ml"]["values"] == _online(svc, "spark_ml")["predictions"]
    inputs = {spec["name"]: spec["type"] for spec in answers["classifier"]["signature_inputs"]}
    assert inputs == {"passenger_count": "long", "trip_distance": "double", "hour": "long", "day_of_week": "long",
                      "h_distance": "double"}  # fmt: skip
    assert answers["sequence"]["signature_inputs"][0]["type"] == "tensor"


def _serve(venv: Path, directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [str(venv / "bin" / "mlflow"), "models", "serve", "-m", str(directory), "--env-manager", "local",
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        env=mlflow_env.clean_env(venv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"mlflow models serve exited: {(proc.stderr or io.BytesIO()).read()[-3000:]!r}")
        try:
            if httpx.get(f"{url}/ping", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise AssertionError("mlflow models serve did not answer /ping in 180 s")


def test_mlflow_models_serve_answers_invocations(svc: Service, trained: Any, venv: Path,
                                                 tmp_path: Path) -> None:  # fmt: skip
    trained("classifier", "xgboost")
    for key in ("classifier", "xgboost"):
        directory = _download(svc, key, "mlflow", tmp_path / key)
        columns, rows = _rows(key)
        proc, url = _serve(venv, directory)
        try:
            answer = httpx.post(f"{url}/invocations", json={"dataframe_split": {"columns": columns, "data": rows}},
                                timeout=60)  # fmt: skip
            example = httpx.post(f"{url}/invocations", content=(directory / "serving_input_example.json").read_bytes(),
                                 headers={"content-type": "application/json"}, timeout=60)  # fmt: skip
        finally:
            proc.terminate()
            proc.wait(30)
        assert answer.status_code == 200, answer.text
        assert example.status_code == 200, example.text
        online = _online(svc, key)
        if key == "classifier":
            served = answer.json()["predictions"]
            assert [r["prediction"] for r in served] == online["predictions"]
            np.testing.assert_allclose([r["probabilities"] for r in served], online["probabilities"], rtol=1e-6)
        else:
            assert answer.json()["predictions"] == [p[1] for p in online["probabilities"]]


def test_torch_networks_download_as_onnx(svc: Service, trained: Any, tmp_path: Path) -> None:
    import onnxruntime as ort

    trained("cnn", "sequence", "regressor")
    for key in ("cnn", "sequence", "regressor"):
        directory = _download(svc, key, "onnx", tmp_path / key)
        sidecar = json.loads((directory / "sparktrain_onnx.json").read_text())
        session = ort.InferenceSession(str(directory / "model.onnx"))
        online = _online(svc, key)
        if key == "sequence":
            x = np.asarray(_sequences(), dtype=np.float32)
            feeds = {"input": x, "mask": np.ones(x.shape[:2], dtype=np.float32)}
        else:
            _, rows = _rows(key)
            feeds = {"input": np.asarray([np.ravel(r) for r in rows], dtype=np.float32)}
        assert [i["name"] for i in sidecar["inputs"]] == [i.name for i in session.get_inputs()] == list(feeds)
        outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
        if key == "regressor":
            np.testing.assert_allclose(outputs["prediction"][:, 0], online["predictions"], rtol=1e-5)
            assert sidecar["normalizer"]["in_graph"] is True
        else:
            np.testing.assert_allclose(outputs["probabilities"], online["probabilities"], rtol=1e-5, atol=1e-6)
            assert outputs["class_index"].tolist() == online["class_index"]
    again = svc.client.get("/models/el-cnn/versions/1/artifact", params={"format": "onnx"})
    assert again.status_code == 200  # from the cached export


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    return dict(response.json())


def test_formats_a_family_does_not_have(svc: Service, trained: Any) -> None:
    trained("cnn", "xgboost", "spark_ml")
    unknown = svc.client.get("/models/el-cnn/versions/1/artifact", params={"format": "pmml"})
    detail = json.dumps(_problem(unknown, 422))
    assert all(f in detail for f in ("archive", "mlflow", "onnx"))
    for name, family in (("el-xgboost", "xgboost"), ("el-spark", "spark_ml")):
        onnx = _problem(svc.client.get(f"/models/{name}/versions/1/artifact", params={"format": "onnx"}), 422)
        assert f"{family} models download as archive or mlflow" in onnx["detail"]
        unknown = _problem(svc.client.get(f"/models/{name}/versions/1/artifact", params={"format": "pmml"}), 422)
        assert unknown["detail"] == f"format: unknown format 'pmml'; {family} models download as archive or mlflow"
        assert unknown["errors"][0]["in"] == "query", unknown  # it said body (bad-input walkthrough)
    version = svc.client.get("/models/el-xgboost/versions/1").json()
    assert version["formats"] == ["archive", "mlflow"] and version["signature"]["recorded"] is True


def test_predict_checks_the_signature_before_running(svc: Service, trained: Any) -> None:
    trained("classifier")
    post = svc.client.post
    row = dict(zip(TAXI, _rows("classifier")[1][0], strict=True))
    model = {"name": "el-classifier"}
    without_hour = [{k: v for k, v in row.items() if k != "hour"}]
    missing = _problem(post("/predict", json={"model": model, "dataframe_records": without_hour}), 422)
    assert "missing features ['hour']" in missing["detail"] and "hour: long" in missing["detail"]
    extra = _problem(post("/predict", json={"model": model, "dataframe_records": [{**row, "tip": 1.0}]}), 422)
    assert "unexpected features ['tip']" in extra["detail"]
    typed = _problem(post("/predict", json={"model": model, "dataframe_records": [{**row, "trip_distance": "far"}]}),
                     422)  # fmt: skip
    assert "'trip_distance'" in typed["detail"] and "trip_distance: double" in typed["detail"]
    fraction = _problem(post("/predict", json={"model": model, "dataframe_records": [{**row, "hour": 9.5}]}), 422)
    assert "'hour' takes whole numbers" in fraction["detail"]
    plain = post("/predict", json={"model": model, "dataframe_records": [row]})
    for params in ({}, {"temperature": 0.5}):  # MLflow clients send it; it was a 422 "Extra inputs"
        with_params = post("/predict", json={"model": model, "dataframe_records": [row], "params": params})
        assert with_params.status_code == 200 and with_params.json() == plain.json(), with_params.text
    split = _problem(post("/predict", json={"model": model, "dataframe_split": {"columns": [*TAXI[:-1], "tip"],
                                                                                 "data": [[1] * 5]}}), 422)  # fmt: skip
    assert "missing features ['h_distance']" in split["detail"]

    tensors = [{"name": f, "shape": [1], "datatype": "FP64", "data": [row[f]]} for f in TAXI]
    tip = {"name": "tip", "shape": [1], "datatype": "FP64", "data": [1]}
    v2 = post("/v2/models/el-classifier/infer", json={"inputs": [*tensors, tip]})
    assert "unexpected inputs ['tip']" in _problem(v2, 422)["detail"]
    v2 = post("/v2/models/el-classifier/infer", json={"inputs": [{**tensors[0], "datatype": "BYTES",
                                                                  "data": ["x"]}, *tensors[1:]]})  # fmt: skip
    assert "passenger_count: long" in _problem(v2, 422)["detail"]
    assert post("/v2/models/el-classifier/infer", json={"inputs": tensors}).status_code == 200
    hour = TAXI.index("hour")
    v2 = post("/v2/models/el-classifier/infer", json={"inputs": [*tensors[:hour], {**tensors[hour], "data": [9.5]},
                                                                 *tensors[hour + 1 :]]})  # fmt: skip
    fraction = _problem(v2, 422)  # it said inputs[0], which in V2 is the first tensor, not the row
    assert fraction["detail"].startswith("inputs: row 0, column 'hour' takes whole numbers: 9.5 is not one"), fraction
    assert fraction["errors"][0]["loc"] == "inputs", fraction

    jobs_before = len(svc.client.get("/jobs", params={"limit": 500}).json()["items"])
    batch = post("/predict", json={"model": model, "dataset": {"uri": "taxi-strings.parquet", "key": "trip_id"}})
    detail = _problem(batch, 422)["detail"]  # the dataset check names the column before the signature's would
    assert "'trip_distance' is string" in detail and "numeric" in detail
    assert len(svc.client.get("/jobs", params={"limit": 500}).json()["items"]) == jobs_before
    assert svc.done("/predict", {"model": model, "dataset": {"uri": "taxi-keyed.parquet", "key": "trip_id"}})

    version = svc.client.get("/models/el-classifier/versions/1").json()
    assert version["signature"]["recorded"] is True
    assert {c["name"]: c["type"] for c in version["signature"]["inputs"]}["passenger_count"] == "long"
    columns = version["signature"]["inputs"] + version["signature"]["outputs"]
    assert all(None not in c.values() for c in columns), columns  # MLflow's Schema.from_json refuses "items": null
    schema = svc.client.get("/openapi.json").json()["components"]["schemas"]
    assert "ModelSignature" in schema and "signature" in schema["ModelVersionRead"]["properties"]


def test_a_version_from_before_signatures_gets_a_derived_one(svc: Service, trained: Any,
                                                             tmp_path: Path) -> None:  # fmt: skip
    trained("regressor")
    """A version as every release before this one registered it (spec.json and weights, no signature, no MLflow
    files): its signature is derived from its feature names (every feature a number), shown as such, and checked;
    its MLflow download gets the files, saying what was not recorded."""
    import shutil

    from app.db.session import transaction
    from app.services import models
    from workers.storage import local_path

    source = svc.client.get("/models/el-regressor/versions/1").json()
    params = {k: v for k, v in source["params"].items() if k not in ("signature", "input_example")}
    old = tmp_path / "old-model"
    old.mkdir()
    shutil.copy(local_path(source["artifact_uri"]) / "weights.safetensors", old)
    spec = json.loads((local_path(source["artifact_uri"]) / "spec.json").read_text())
    (old / "spec.json").write_text(json.dumps({k: v for k, v in spec.items() if k in params or k == "network"}))
    with transaction(svc.runtime.db) as session:
        models.register_version(session=session, name="el-old", framework="torch", artifact_uri=str(old),
                                metrics={}, params=params, job_id=None)  # fmt: skip
    version = svc.client.get("/models/el-old/versions/1").json()
    assert version["signature"]["recorded"] is False
    assert [c["type"] for c in version["signature"]["inputs"]] == ["double"] * len(TAXI)
    row = dict(zip(TAXI, _rows("regressor")[1][0], strict=True))
    answer = svc.client.post("/predict", json={"model": {"name": "el-old"}, "dataframe_records": [row]})
    assert answer.status_code == 200, answer.text
    extra = svc.client.post("/predict", json={"model": {"name": "el-old"}, "dataframe_records": [{**row, "x": 1}]})
    assert "unexpected features ['x']" in _problem(extra, 422)["detail"]
    zipped = svc.client.get("/models/el-old/versions/1/artifact", params={"format": "mlflow"})
    with zipfile.ZipFile(io.BytesIO(zipped.content)) as archive:
        mlmodel = archive.read("el-old-v1/MLmodel").decode()
    assert "signature_recorded: false" in mlmodel and "requirements_recorded: false" in mlmodel
    assert '\\"type\\": \\"double\\"' in mlmodel


def test_early_stopping_through_the_service(svc: Service) -> None:
    """``mode: max`` on val_loss makes epoch 1 (the highest loss) the best: the job stops after epoch 2 and
    registers epoch 1's weights, which are its checkpoint's bytes. A metric the job does not compute is a 422
    before any job exists."""
    from safetensors.torch import load_file

    from workers.storage import local_path

    body = {**MODELS["cnn"], "name": "el-stopping",
            "training": {**TRAINING, "epochs": 4, "early_stopping": {"mode": "max", "patience": 1}}}  # fmt: skip
    jobs_before = len(svc.client.get("/jobs", params={"limit": 500}).json()["items"])
    wrong = {**body, "training": {**body["training"], "early_stopping": {"metric": "val_rmse"}}}
    problem = _problem(svc.client.post("/train", json=wrong), 422)
    assert problem["errors"][0]["loc"] == "training.early_stopping.metric" and "val_accuracy" in problem["detail"]
    assert len(svc.client.get("/jobs", params={"limit": 500}).json()["items"]) == jobs_before

    job = svc.done("/train", body)
    result = job["result"]
    assert result["stopped_early"] is True and result["best_epoch"] == 1
    assert result["early_stopping"]["stop_reason"] == "patience" and result["early_stopping"]["epochs_run"] == 2
    assert list(result["best_score"]) == ["val_loss"]
    checkpoints = svc.client.get(f"/jobs/{job['id']}/checkpoints").json()["checkpoints"]
    assert sorted(c["epoch"] for c in checkpoints) == [1, 2]
    best = next(c for c in checkpoints if c["epoch"] == 1)
    version = svc.client.get("/models/el-stopping/versions/1").json()
    registered = load_file(str(local_path(version["artifact_uri"]) / "weights.safetensors"))
    saved = load_file(str(local_path(best["uri"]) / "weights.safetensors"))
    assert {k: v.numpy().tobytes() for k, v in registered.items()} == {k: v.numpy().tobytes() for k, v in saved.items()}
    assert version["metrics"] == result["validation"] == best["metrics"]
    logs = svc.client.get(f"/jobs/{job['id']}/logs").json()
    assert any("early stopping: no improvement of val_loss in 1 epochs after epoch 2" in line["message"]
               for line in logs["lines"])  # fmt: skip
