"""xgboost through the real service: train with xgboost.spark on local[2], then evaluate, batch- and online-predict
the registered booster, and load it with plain xgboost."""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.helpers import TAXI_FEATURES, Service, running_service

REPO = Path(__file__).resolve().parents[2]
RATE_NAMES = {1: "standard", 2: "jfk", 3: "newark", 5: "negotiated"}


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data = tmp_path_factory.mktemp("data")
    for part in ("train", "eval"):
        taxi = pd.read_parquet(REPO / "datasets" / "taxi" / f"{part}.parquet")
        taxi = taxi.assign(trip_id=np.arange(len(taxi)), rate_name=taxi["rate_code"].map(RATE_NAMES),
                           long_trip=(taxi["trip_distance"] > 3).astype("int32"))  # fmt: skip
        taxi.to_parquet(data / f"taxi-{part}.parquet")
    with running_service(spark, tmp_path_factory.mktemp("svc"), data_roots=[data, REPO / "datasets"]) as service:
        yield service


def xgb_request(name: str, params: dict[str, Any], **dataset: Any) -> dict[str, Any]:
    ds = {"uri": "taxi-train.parquet", "features": TAXI_FEATURES, "label": "fare_amount", "task": "regression"}
    return {
        "name": name,
        "framework": "xgboost",
        "dataset": {**ds, **dataset},
        "validation": {"uri": "taxi-eval.parquet"},
        "params": params,
    }


def finished(svc: Service, body: dict[str, Any]) -> dict[str, Any]:
    job = svc.wait(svc.train(body)["id"], {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED", job["error"]
    return job


def plain_rmse(params: dict[str, Any], rounds: int) -> float:
    import xgboost

    train = pd.read_parquet(REPO / "datasets" / "taxi" / "train.parquet")
    test = pd.read_parquet(REPO / "datasets" / "taxi" / "eval.parquet")
    dtrain = xgboost.DMatrix(train[TAXI_FEATURES], label=train["fare_amount"])
    booster = xgboost.train({**params, "nthread": 2, "seed": 0}, dtrain, num_boost_round=rounds)
    predicted = booster.predict(xgboost.DMatrix(test[TAXI_FEATURES]))
    return float(np.sqrt(np.mean((predicted - test["fare_amount"].to_numpy()) ** 2)))


def test_regression_matches_plain_xgboost_and_serves_everywhere(svc: Service) -> None:
    params = {"learning_rate": 0.1, "max_depth": 6, "subsample": 0.8, "gamma": 1}
    job = finished(svc, xgb_request("taxi-xgb", {**params, "num_round": 60, "num_workers": 2}))
    result = job["result"]
    assert result["device"] == "cpu" and result["num_workers"] == 2
    assert result["rounds"] == {"requested": 60, "trained": 60, "kept": 60, "resumed_from": 0}
    plain = plain_rmse({**params, "objective": "reg:squarederror"}, 60)
    assert abs(result["validation"]["rmse"] - plain) / plain < 0.05, (result["validation"], plain)
    gain = result["feature_importance"]["gain"]
    assert set(gain) == set(TAXI_FEATURES) and abs(sum(gain.values()) - 1) < 1e-9
    assert max(gain, key=gain.__getitem__) in ("rate_code", "trip_distance", "h_distance")

    for key in ("validation_rmse", "train_rmse"):  # every round once: reported while it ran, not again at the end
        metrics = svc.client.get(f"/jobs/{job['id']}/metrics", params={"key": key}).json()["metrics"]
        assert [m["step"] for m in metrics] == list(range(1, 61)), (key, [m["step"] for m in metrics])
        assert metrics[-1]["value"] < metrics[0]["value"]
    assert job["progress"] == 1.0

    # The artifact is xgboost's own JSON: plain xgboost loads it and predicts what the service predicts.
    import xgboost

    archive = svc.client.get("/models/taxi-xgb/versions/1/artifact")
    assert archive.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(archive.content)) as tar:
        raw = tar.extractfile("taxi-xgb-v1/model.json")
        assert raw is not None
        booster = xgboost.Booster(model_file=bytearray(raw.read()))
    rows = pd.read_parquet(REPO / "datasets" / "taxi" / "eval.parquet").head(20)
    online = svc.client.post(
        "/predict", json={"model": {"name": "taxi-xgb"}, "dataframe_records": rows[TAXI_FEATURES].to_dict("records")}
    )
    assert online.status_code == 200, online.text
    plain_pred = booster.predict(xgboost.DMatrix(rows[TAXI_FEATURES].astype("float32")))
    np.testing.assert_allclose(online.json()["predictions"], plain_pred, rtol=1e-5, atol=1e-4)

    evaluation = svc.client.post(
        "/evaluate",
        json={"model": {"name": "taxi-xgb"}, "dataset": {"uri": "taxi-eval.parquet"}, "metrics": ["regression"]},
    )
    assert evaluation.status_code == 202, evaluation.text
    evaluated = svc.wait(evaluation.json()["id"], {"SUCCEEDED", "FAILED"})
    assert evaluated["status"] == "SUCCEEDED", evaluated["error"]
    assert evaluated["result"]["regression"]["rmse"] == pytest.approx(result["validation"]["rmse"], rel=1e-4)

    out = str(Path(svc.runtime.settings.data_roots[0]) / "xgb-predictions")
    batch = svc.client.post(
        "/predict",
        json={
            "model": {"name": "taxi-xgb"},
            "dataset": {"uri": "taxi-eval.parquet", "key": "trip_id"},
            "output_uri": out,
        },
    )
    assert batch.status_code == 202, batch.text
    predicted = svc.wait(batch.json()["id"], {"SUCCEEDED", "FAILED"})
    assert predicted["status"] == "SUCCEEDED", predicted["error"]
    written = pd.read_parquet(out).sort_values("trip_id").head(20)
    np.testing.assert_allclose(written["prediction"], plain_pred, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("workers", [1, 2], ids=["one-task", "xgboost-spark"])
def test_early_stopping_keeps_the_best_rounds(svc: Service, workers: int) -> None:
    params = {"learning_rate": 0.5, "max_depth": 8, "num_round": 400, "early_stopping_rounds": 5,
              "num_workers": workers}  # fmt: skip
    job = finished(svc, xgb_request(f"taxi-xgb-early-{workers}", params))
    result = job["result"]
    rounds = result["rounds"]
    assert rounds["trained"] < 400, "a learning rate of 0.5 overfits long before 400 rounds"
    assert rounds["kept"] == result["best_iteration"] + 1 == rounds["trained"] - 5
    metrics = svc.client.get(f"/jobs/{job['id']}/metrics", params={"key": "validation_rmse"}).json()["metrics"]
    assert [m["step"] for m in metrics] == list(range(1, rounds["trained"] + 1))  # the final rmse not added at kept
    # the history is the kept round's, beside the kept model's validation (it was the last round trained)
    assert result["history"]["validation_rmse"] == metrics[rounds["kept"] - 1]["value"]
    assert result["history"]["validation_rmse"] < metrics[-1]["value"]


def test_labels_the_objective_cannot_take_fail_the_job_saying_so(svc: Service) -> None:
    """reg:gamma on a 0/1 label: xgboost failed the fit with its Python traceback and a C++ backtrace (~2,000
    characters); the job reads the labels' range first."""
    body = xgb_request("taxi-xgb-gamma", {"objective": "reg:gamma", "num_round": 5}, label="long_trip")
    job = svc.wait(svc.train(body)["id"], {"SUCCEEDED", "FAILED"})
    assert job["status"] == "FAILED" and job["error"]["reason"] == "INVALID_REQUEST", job
    assert job["error"]["message"] == ("params.objective reg:gamma needs labels positive; the training labels run from "
                                       "0 to 1: choose another objective (reg:squarederror takes any) or transform the "
                                       "label"), job["error"]  # fmt: skip


@pytest.mark.parametrize("workers", [1, 2], ids=["one-task", "xgboost-spark"])
def test_rounds_are_readable_while_the_fit_runs_and_a_cancel_stops_its_spark_job(svc: Service, workers: int) -> None:
    # 20,000 rounds take minutes on local[2]: the job is cancelled as soon as a few of them are in its metrics
    params = {"learning_rate": 0.01, "max_depth": 6, "num_round": 20_000, "num_workers": workers}
    job_id = svc.train(xgb_request(f"taxi-xgb-live-{workers}", params))["id"]
    deadline = time.monotonic() + 120
    seen: list[dict[str, Any]] = []
    while len(seen) < 3:
        assert time.monotonic() < deadline, "no round reached the job's metrics"
        time.sleep(0.2)
        seen = svc.client.get(f"/jobs/{job_id}/metrics", params={"key": "validation_rmse"}).json()["metrics"]
    running = svc.client.get(f"/jobs/{job_id}").json()
    assert running["status"] == "RUNNING", running  # read while the fit runs, not written at its end
    assert [m["step"] for m in seen] == list(range(1, len(seen) + 1))
    assert svc.client.post(f"/jobs/{job_id}/cancel").status_code == 202
    stopped = svc.wait(job_id, {"CANCELLED", "SUCCEEDED", "FAILED"}, timeout=120)
    assert stopped["status"] == "CANCELLED" and stopped["model"] is None, stopped
    # the fit's Spark job was cancelled with the job's group, not left training to the end
    tracker = svc.runtime.spark.sparkContext.statusTracker()
    spark_jobs = [tracker.getJobInfo(i) for i in tracker.getJobIdsForGroup(job_id)]
    assert spark_jobs and all(j is not None and j.status != "RUNNING" for j in spark_jobs), spark_jobs
    assert any(j.status == "FAILED" for j in spark_jobs), spark_jobs
    steps = [m["step"] for m in svc.client.get(f"/jobs/{job_id}/metrics", params={"key": "validation_rmse"}).json()
             ["metrics"]]  # fmt: skip
    assert steps == list(range(1, len(steps) + 1)) and len(steps) < 20_000


@pytest.mark.parametrize("workers", [1, 2], ids=["one-task", "xgboost-spark"])
def test_multiclass_with_string_labels(svc: Service, workers: int) -> None:
    features = [f for f in TAXI_FEATURES if f != "rate_code"]
    name = f"rate-xgb-{workers}"
    body = xgb_request(
        name,
        {"max_depth": 4, "num_round": 30, "eval_metric": "mlogloss", "num_workers": workers},
        features=features,
        label="rate_name",
        task="classification",
    )
    job = finished(svc, body)
    assert job["result"]["objective"] == "multi:softprob"
    assert job["result"]["validation"]["accuracy"] > 0.95
    # merror is evaluated too (in front: mlogloss stays the last metric), and each round has its accuracy; the last
    # is the result's, which Spark's evaluator (xgboost.spark) or numpy (one task) computed on the same rows
    assert set(job["result"]["history"]) >= {"validation_merror", "validation_mlogloss"}
    rounds = svc.client.get(f"/jobs/{job['id']}/metrics", params={"key": "validation_accuracy"}).json()["metrics"]
    assert [m["step"] for m in rounds] == list(range(1, 31))
    assert rounds[-1]["value"] == pytest.approx(job["result"]["validation"]["accuracy"], abs=1e-9)
    version = svc.client.get(f"/models/{name}/versions/1").json()
    assert version["params"]["class_labels"] == ["jfk", "negotiated", "newark", "standard"]
    rows = pd.read_parquet(REPO / "datasets" / "taxi" / "eval.parquet").head(50)
    answer = svc.client.post(
        "/predict", json={"model": {"name": name}, "dataframe_records": rows[features].to_dict("records")}
    ).json()
    named = [RATE_NAMES[c] for c in rows["rate_code"]]
    assert np.mean([a == b for a, b in zip(answer["predictions"], named, strict=True)]) > 0.9
    assert np.allclose(np.sum(answer["probabilities"], axis=1), 1.0)
    # V2: the metadata lists every output infer answers, the class names too
    first = rows[features].head(2).to_numpy(dtype=np.float32)
    tensor = {"name": "input", "shape": list(first.shape), "datatype": "FP32", "data": first.reshape(-1).tolist()}
    inferred = svc.client.post(f"/v2/models/{name}/infer", json={"inputs": [tensor]}).json()
    listed = svc.client.get(f"/v2/models/{name}").json()["outputs"]
    assert [o["name"] for o in listed] == [o["name"] for o in inferred["outputs"]] == ["predictions", "probabilities",
                                                                                       "label"]  # fmt: skip
    assert [o["datatype"] for o in listed] == [o["datatype"] for o in inferred["outputs"]]

    evaluation = svc.client.post(
        "/evaluate",
        json={"model": {"name": name}, "dataset": {"uri": "taxi-eval.parquet"}, "metrics": ["classification"]},
    )
    evaluated = svc.wait(evaluation.json()["id"], {"SUCCEEDED", "FAILED"})
    assert evaluated["status"] == "SUCCEEDED", evaluated["error"]
    assert evaluated["result"]["classification"]["accuracy"] == pytest.approx(
        job["result"]["validation"]["accuracy"], abs=1e-9
    )
    # the per-class arrays are in index order: the classes are named (they were not)
    assert evaluated["result"]["classification"]["class_labels"] == ["jfk", "negotiated", "newark", "standard"]
    # a bad row in the evaluated data: BAD_ROWS showing it (the first-rows query compared the text classes with
    # numbers, and the job failed SPARK_ERROR: "The value 'jfk' ... cannot be cast to BIGINT")
    data = Path(svc.runtime.settings.data_roots[0])
    bad = pd.read_parquet(data / "taxi-eval.parquet").head(30)[[*features, "rate_name"]].astype({features[0]: object})
    bad.loc[bad.index[3], features[0]] = "n/a"
    bad.to_csv(data / "named-bad.csv", index=False)
    evaluation = svc.client.post("/evaluate", json={"model": {"name": name}, "dataset": {"uri": "named-bad.csv"},
                                                    "metrics": ["classification"]})  # fmt: skip
    failed = svc.wait(evaluation.json()["id"], {"SUCCEEDED", "FAILED"})
    assert failed["status"] == "FAILED" and failed["error"]["reason"] == "BAD_ROWS", failed["error"]
    assert f"not a number: 'n/a' ({features[0]})" in failed["error"]["message"], failed["error"]


def test_validation_rows_with_a_class_the_training_data_lacks(svc: Service) -> None:
    """xgboost and Spark ML alike: refused as BAD_ROWS naming each unknown label and its rows (Spark ML failed with
    StringIndexer's raw "Unseen label"), or dropped with a warning under bad_rows=skip."""
    data = Path(svc.runtime.settings.data_roots[0])
    unknown = pd.read_parquet(data / "taxi-eval.parquet").head(400)
    unknown.loc[:4, "rate_name"], unknown.loc[5:6, "rate_name"] = "luxury", "limo"
    unknown.to_parquet(data / "taxi-eval-unknown.parquet")
    features = [f for f in TAXI_FEATURES if f != "rate_code"]
    xgb = xgb_request("rate-unknown", {"max_depth": 2, "num_round": 3}, features=features, label="rate_name",
                      task="classification")  # fmt: skip
    xgb["validation"] = {"uri": "taxi-eval-unknown.parquet"}
    forest = {**xgb, "framework": "spark_ml", "params": {"algorithm": "random_forest", "numTrees": 3}}
    for body in (xgb, forest):
        failed = svc.wait(svc.train(body)["id"], {"SUCCEEDED", "FAILED"})
        assert failed["status"] == "FAILED" and failed["error"]["reason"] == "BAD_ROWS", failed["error"]
        message = failed["error"]["message"]
        assert message.startswith("7 rows of ") and "'luxury' (5 rows), 'limo' (2 rows)" in message, message
        assert "'jfk'" in message and 'bad_rows to "skip"' in message, message
    for body in (xgb, forest):
        skipping = {**body, "dataset": {**body["dataset"], "bad_rows": "skip"}}
        job = finished(svc, skipping)
        assert any(w.startswith("dropped 7 rows of ") for w in job["warnings"]), job["warnings"]
        assert job["result"]["rows"]["validation"] in (393, 400), job["result"]["rows"]


def test_binary_classification_with_weights(svc: Service) -> None:
    features = ["pickup_longitude", "pickup_latitude", "dropoff_longitude", "dropoff_latitude", "hour"]
    body = xgb_request(
        "long-xgb",
        {"max_depth": 5, "num_round": 40, "eval_metric": "auc", "num_workers": 1},
        features=features,
        label="long_trip",
        task="classification",
        weight="passenger_count",
    )
    job = finished(svc, body)
    assert job["result"]["objective"] == "binary:logistic"
    assert job["result"]["validation"]["accuracy"] > 0.85
    metrics = svc.client.get(f"/jobs/{job['id']}/metrics", params={"key": "validation_auc"}).json()["metrics"]
    assert len(metrics) == 40 and metrics[-1]["value"] > 0.9


@pytest.mark.parametrize(
    ("params", "task", "where", "says"),
    [
        (
            {"max_dept": 8, "lerning_rate": 0.1},
            "regression",
            "params.lerning_rate",
            "'lerning_rate'; known: ",
        ),  # max_dept: its own entry
        ({"objective": "binary:logistic"}, "regression", "params.objective", "classification objective"),
        ({"objective": "reg:squarederror"}, "classification", "params.objective", "regression objective"),
        ({"objective": "multi:softmax"}, "classification", "params.objective", "multi:softprob"),
        ({"num_workers": 3}, "regression", "params.num_workers", "this cluster has 2"),
        ({"eval_metric": "auc"}, "regression", "params.eval_metric", "not a regression metric"),
        ({"max_depth": -1}, "regression", "params.max_depth", "between 0"),
        ({"early_stopping_rounds": 0}, "regression", "params.early_stopping_rounds", "between 1"),
        ({"num_workers": 2, "threads_per_worker": 2}, "regression", "params.threads_per_worker", "2 cores"),
    ],
)
def test_bad_parameters_are_422_before_a_job_exists(
    svc: Service, params: dict[str, Any], task: str, where: str, says: str
) -> None:
    label = "fare_amount" if task == "regression" else "rate_name"
    features = [f for f in TAXI_FEATURES if f != "rate_code"]
    before = svc.client.get("/jobs", params={"limit": 200}).json()["items"]
    response = svc.client.post("/train", json=xgb_request("bad", params, label=label, task=task, features=features))
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert says in problem["detail"], problem
    assert problem["errors"][0]["loc"] == where
    assert svc.client.get("/jobs", params={"limit": 200}).json()["items"] == before


def test_cuda_without_gpus_is_a_clear_422(svc: Service) -> None:
    body = {**xgb_request("cuda-xgb", {"num_round": 5}), "device": "cuda"}
    response = svc.client.post("/train", json=body)
    assert response.status_code == 422, response.text
    assert "no executor has GPUs" in response.json()["detail"]


def test_gpu_hist_from_the_article_trains_hist_on_cpu_and_says_so(svc: Service) -> None:
    """Also the local-master default: one worker with every core, as plain xgboost would run."""
    job = finished(svc, xgb_request("hist-xgb", {"tree_method": "gpu_hist", "num_round": 5}))
    assert job["result"]["num_workers"] == 1
    logs = svc.client.get(f"/jobs/{job['id']}/logs").json()["lines"]
    assert any("gpu_hist" in line["message"] and line["level"] == "WARNING" for line in logs)
    assert any("1 worker (cpu, 2 threads each)" in line["message"] for line in logs), logs
    version = svc.client.get("/models/hist-xgb/versions/1").json()
    assert json.dumps(version["params"]["spec"]["params"]["tree_method"]) == '"hist"'


def _progress_until_it_ends(svc: Service, job_id: str) -> tuple[list[tuple[float, str | None]], dict[str, Any]]:
    """Every (progress, progress_message) that GET /jobs/{id} showed while the job ran, in order, and the job."""
    deadline = time.monotonic() + 600
    seen: list[tuple[float, str | None]] = []
    while (job := svc.client.get(f"/jobs/{job_id}").json())["status"] not in {"SUCCEEDED", "FAILED", "CANCELLED"}:
        shown = (job["progress"], job["progress_message"])
        if job["status"] == "RUNNING" and (not seen or seen[-1] != shown):
            seen.append(shown)
        assert time.monotonic() < deadline, f"{job_id} still {job['status']} after 600 s; last shown {seen[-3:]}"
        time.sleep(0.05)
    return seen, job


@pytest.mark.parametrize(("workers", "rounds"), [(1, 4000), (2, 3000)], ids=["one-task", "xgboost-spark"])
def test_progress_moves_with_the_rounds_while_the_booster_trains(svc: Service, workers: int, rounds: int) -> None:
    """GET /jobs/{id} shows the rounds done while they run ("training: round 120 of 3000"), between the start of
    the fit (5%) and its end (85%), and the bar never goes back. The rounds take seconds on a quiet machine (one
    task's rounds are faster: it has more of them), reported every half second, so polling sees the middle of the
    fit however fast or slow the machine is."""
    params = {"learning_rate": 0.01, "max_depth": 4, "num_round": rounds, "num_workers": workers}
    seen, job = _progress_until_it_ends(svc, svc.train(xgb_request(f"taxi-xgb-progress-{workers}", params))["id"])
    assert job["status"] == "SUCCEEDED", job["error"]
    assert job["progress"] == 1.0 and job["result"]["rounds"]["trained"] == rounds
    fractions = [fraction for fraction, _ in seen]
    assert fractions == sorted(fractions), seen
    middle: list[tuple[int, float]] = []  # (rounds done, progress) shown while the rounds ran
    for fraction, message in seen:
        if message is not None and message.startswith("training: round "):
            done, of = (int(n) for n in message.removeprefix("training: round ").split(" of "))
            assert of == rounds and fraction == pytest.approx(0.05 + 0.8 * done / rounds), (fraction, message)
            if 0 < done < rounds:
                middle.append((done, fraction))
    assert len(middle) >= 2, f"no rounds shown while they ran: {seen}"
    assert [done for done, _ in middle] == sorted(done for done, _ in middle)
    assert all(0.05 < fraction < 0.85 for _, fraction in middle), middle


def test_a_torch_job_cannot_resume_from_an_xgboost_checkpoint(svc: Service) -> None:
    # it said "checkpoint files at ... are unreadable: [Errno 2] ... meta.json" (bad-input walkthrough)
    from bench.chaos import digits_job

    params = {"num_round": 10, "checkpoint_rounds": 5, "num_workers": 1, "validation_fraction": 0.3}
    job = finished(svc, xgb_request("xgb-ckpt", params))
    # a fraction beside a validation set was ignored without a word (bad-input walkthrough)
    assert "params.validation_fraction is not used: validation names the validation data" in job["warnings"], job
    checkpoint = svc.client.get(f"/jobs/{job['id']}/checkpoints").json()["checkpoints"][-1]["id"]
    body = digits_job("torch-from-xgb", epochs=2, workers=1)
    body["training"]["resume_from"] = checkpoint
    response = svc.client.post("/train", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["loc"] == "training.resume_from", response.text
    assert f"checkpoint {checkpoint!r} belongs to a 'xgboost' job" in response.json()["detail"], response.text
    # nor serve predictions, and the 422 says what does (it said xgboost jobs write no checkpoints)
    row = dict.fromkeys(TAXI_FEATURES, 1.0)
    served = svc.client.post("/predict", json={"model": {"checkpoint": checkpoint}, "dataframe_records": [row]})
    assert served.status_code == 422, served.text
    assert "this is an xgboost job's, which its job resumes from; use the model version" in served.json()["detail"]


def test_two_validation_fractions_say_which_holds(svc: Service) -> None:
    """dataset.split's fraction beat params.validation_fraction without a word (xgboost walkthrough)."""
    params = {"num_round": 2, "validation_fraction": 0.1}
    body = xgb_request("xgb-two-fractions", params, split={"validation_fraction": 0.5})
    del body["validation"]
    queued = svc.client.post("/train", json=body)
    said = "params.validation_fraction is not used: dataset.split.validation_fraction holds out 0.5 of the rows"
    assert queued.status_code == 202 and queued.json()["warnings"] == [said], queued.text  # in the 202: it was []
    job = svc.wait(queued.json()["id"], {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED" and job["warnings"].count(said) == 1, job  # said again at the start: once
    # a split beside a validation set was dropped without a word
    both = xgb_request("xgb-split-and-validation", {"num_round": 2}, split={"validation_fraction": 0.2})
    queued = svc.client.post("/train", json=both)
    unused = "dataset.split is not used: validation names the validation data, and every training row trains"
    assert queued.status_code == 202 and queued.json()["warnings"] == [unused], queued.text
    rows = job["result"]["rows"]
    assert rows["validation"] == pytest.approx(rows["train"], rel=0.1)  # half held out, as the warning says


def test_integer_classes_with_no_rows_are_warned_about(svc: Service) -> None:
    """rate_code is 1, 2, 3 or 5: the model learns classes 0..5 and never sees 0 or 4 (it said nothing; scikit-learn's
    XGBClassifier refuses such labels)."""
    features = [f for f in TAXI_FEATURES if f != "rate_code"]
    job = finished(svc, xgb_request("rate-ints", {"num_round": 2}, features=features, label="rate_code",
                                    task="classification"))  # fmt: skip
    said = ("dataset.label 'rate_code' has no rows of class 0, 4 of 0..5 (integer labels are class indices): the "
            "model learns 6 classes, 2 never seen; number the classes from 0, or give them as text")  # fmt: skip
    assert said in job["warnings"], job["warnings"]


@pytest.mark.parametrize("params", [{"max_bin": 64}, {"tree_method": "approx"}], ids=["max_bin", "approx"])
def test_max_bin_and_approx_train_on_one_worker(svc: Service, params: dict[str, Any]) -> None:
    """Every one-worker CPU job with max_bin other than 256 or tree_method approx failed with a C++ backtrace."""
    job = finished(svc, xgb_request(f"xgb-{'-'.join(params)}", {"num_round": 2, "num_workers": 1, **params}))
    assert job["result"]["rounds"]["trained"] == 2 and job["result"]["num_workers"] == 1


def test_a_continuous_label_is_not_a_class(svc: Service) -> None:
    """Classification of fare_amount was accepted and failed with BAD_ROWS "label outside 0..106"."""
    response = svc.client.post("/train", json=xgb_request("xgb-fares", {"num_round": 2}, task="classification"))
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["loc"] == "dataset.label"
    assert "'fare_amount' holds fractions" in response.json()["detail"], response.text


def test_resume_from_says_what_an_xgboost_job_can_do(svc: Service) -> None:
    """It said "xgboost takes params, not training (torch's)": a dead end for a user with a checkpoint id. A new job
    continues a checkpoint now (tests/e2e/test_xgboost_resume_from.py); an unknown one is named."""
    body = {**xgb_request("xgb-resume", {"num_round": 2}), "training": {"resume_from": "0" * 32}}
    response = svc.client.post("/train", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["loc"] == "training.resume_from"
    assert response.json()["detail"] == f"training.resume_from: no checkpoint with id {'0' * 32!r}", response.text
