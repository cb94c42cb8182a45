"""``training.resume_from`` for xgboost through the real service (docs/xgboost.md): a new job goes on boosting
another job's checkpoint (``num_round`` counts its rounds too), keeps early stopping's state where it watches the
same metric, encodes with the checkpoint's categories, and says where it started; a request that cannot continue
the checkpoint is a 422 naming the field, with nothing written. (It was a 422 for every xgboost request.)"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

from tests.helpers import OWNER_KEYS, OWNER_KEYS_SETTING, TAXI_FEATURES, Service, problem, running_service
from workers import storage

REPO = Path(__file__).resolve().parents[2]
RATE_NAMES = {1: "standard", 2: "jfk", 3: "newark", 5: "negotiated"}
PARAMS = {"learning_rate": 0.3, "max_depth": 4, "num_workers": 1}
EARLY = {"learning_rate": 0.6, "max_depth": 8, "num_workers": 1, "early_stopping_rounds": 5, "checkpoint_rounds": 5}
"""A learning rate of 0.6 overfits the taxi fares long before 400 rounds (tests/workers/.../test_xgb_resume.py)."""


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    data = tmp_path_factory.mktemp("data")
    for part in ("train", "eval"):
        taxi = pd.read_parquet(REPO / "datasets" / "taxi" / f"{part}.parquet")
        taxi.assign(rate_name=taxi["rate_code"].map(RATE_NAMES)).to_parquet(data / f"taxi-{part}.parquet")
    pd.read_parquet(data / "taxi-eval.parquet").head(150).to_parquet(data / "taxi-eval-150.parquet")
    train = pd.read_parquet(data / "taxi-train.parquet")
    train[train["rate_code"] != 5].to_parquet(data / "taxi-no5.parquet")  # classes 0..3; no "negotiated"
    for part in ("train", "eval"):  # fares over 20: other rows than taxi-eval's, with another error
        taxi = pd.read_parquet(data / f"taxi-{part}.parquet")
        taxi[taxi["fare_amount"] > 20].to_parquet(data / f"taxi-{part}-hard.parquet")
    roots = [data, REPO / "datasets"]
    with running_service(spark, tmp_path_factory.mktemp("svc"), data_roots=roots, api_keys=OWNER_KEYS_SETTING) as s:
        s.client.headers["Authorization"] = f"Bearer {OWNER_KEYS['root']}"  # an admin: Service.wait reads every job
        yield s


def client(svc: Service, owner: str) -> httpx.Client:
    return httpx.Client(base_url=svc.url, headers={"Authorization": f"Bearer {OWNER_KEYS[owner]}"}, timeout=60)


def body(name: str, params: dict[str, Any], resume_from: str | None = None, **dataset: Any) -> dict[str, Any]:
    ds = {"uri": "taxi-train.parquet", "features": TAXI_FEATURES, "label": "fare_amount", "task": "regression"}
    out = {"name": name, "framework": "xgboost", "dataset": {**ds, **dataset},
           "validation": {"uri": "taxi-eval.parquet"}, "params": params}  # fmt: skip
    if resume_from is not None:
        out["training"] = {"resume_from": resume_from}
    return out


def trained(svc: Service, payload: dict[str, Any], owner: str = "alice") -> dict[str, Any]:
    with client(svc, owner) as c:
        response = c.post("/train", json=payload)
    assert response.status_code == 202, response.text
    job = svc.wait(response.json()["id"], {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED", job["error"]
    return job


def checkpoints(svc: Service, job_id: str) -> dict[int, dict[str, Any]]:
    listed = svc.client.get(f"/jobs/{job_id}/checkpoints").json()["checkpoints"]
    return {c["epoch"]: c for c in listed}


@pytest.fixture(scope="module")
def source(svc: Service) -> dict[str, Any]:
    """alice's job of 20 rounds, with checkpoints at rounds 10 and 20."""
    job = trained(svc, body("xgb-source", {**PARAMS, "num_round": 20, "checkpoint_rounds": 10}))
    return {"job": job, "checkpoints": checkpoints(svc, job["id"])}


def _booster(uri: str) -> Any:
    import xgboost

    return xgboost.Booster(model_file=str(storage.fetch_dir(uri) / "model.json"))


def registered(svc: Service, name: str) -> tuple[Any, dict[str, Any]]:
    """Version 1 of the model: its booster and card, from its archive."""
    import xgboost

    archive = svc.client.get(f"/models/{name}/versions/1/artifact")
    assert archive.status_code == 200, archive.text
    with tarfile.open(fileobj=io.BytesIO(archive.content)) as tar:
        model, card = (tar.extractfile(f"{name}-v1/{file}") for file in ("model.json", "card.json"))
        assert model is not None and card is not None
        return xgboost.Booster(model_file=bytearray(model.read())), json.loads(card.read())


def test_a_new_job_goes_on_boosting_another_jobs_checkpoint(svc: Service, source: dict[str, Any]) -> None:
    checkpoint = source["checkpoints"][10]
    job = trained(svc, body("xgb-continued", {**PARAMS, "num_round": 30}, checkpoint["id"]))
    result = job["result"]
    assert result["rounds"] == {"requested": 30, "trained": 30, "kept": 30, "resumed_from": 10}, result["rounds"]
    assert result["started_from"] == {"checkpoint_id": checkpoint["id"], "job_id": source["job"]["id"], "rounds": 10}
    steps = svc.client.get(f"/jobs/{job['id']}/metrics", params={"key": "validation_rmse"}).json()["metrics"]
    assert [m["step"] for m in steps] == list(range(11, 31))  # the rounds it trained, numbered after the checkpoint's
    lines = [line["message"] for line in svc.client.get(f"/jobs/{job['id']}/logs").json()["lines"]]
    said = f"continuing from checkpoint {checkpoint['id']} of job {source['job']['id']} (training.resume_from)"
    assert any(said in line for line in lines), lines

    # its first 10 rounds are the checkpoint's trees, and the 20 after them only made the model better
    import xgboost

    model, start = registered(svc, "xgb-continued")[0], _booster(checkpoint["uri"])
    assert model.num_boosted_rounds() == 30 and start.num_boosted_rounds() == 10
    evaluation = pd.read_parquet(REPO / "datasets" / "taxi" / "eval.parquet")
    rows, fares = xgboost.DMatrix(evaluation[TAXI_FEATURES]), evaluation["fare_amount"].to_numpy()
    np.testing.assert_allclose(model.predict(rows, iteration_range=(0, 10)), start.predict(rows), rtol=1e-6)
    rmse = {n: float(np.sqrt(np.mean((b.predict(rows) - fares) ** 2))) for n, b in (("start", start), ("end", model))}
    assert rmse["end"] <= rmse["start"], rmse
    assert result["validation"]["rmse"] == pytest.approx(rmse["end"], rel=1e-4)

    # one worker's checkpoint goes on in xgboost.spark's barrier stage of two, which trains on an array column
    # without feature names when the validation rows are fewer than 100 a worker (driver.py _columnar_fits)
    wider = body("xgb-continued-2", {**PARAMS, "num_workers": 2, "num_round": 14}, checkpoint["id"])
    wider = trained(svc, {**wider, "validation": {"uri": "taxi-eval-150.parquet"}})
    assert wider["result"]["rounds"] == {"requested": 14, "trained": 14, "kept": 14, "resumed_from": 10}
    assert wider["result"]["num_workers"] == 2


def test_early_stopping_goes_on_from_the_checkpoints_best_round(svc: Service) -> None:
    first = trained(svc, body("xgb-early", {**EARLY, "num_round": 400}))
    whole = first["result"]
    best, rounds = whole["best_iteration"], whole["rounds"]["trained"]
    assert rounds == best + 1 + 5 < 400, whole["rounds"]
    # a checkpoint after the best round, before the stop (one of every 5 rounds lies there)
    written = checkpoints(svc, first["id"])
    (at,) = [r for r in written if best + 1 < r <= rounds]
    point = written[at]["id"]

    same = trained(svc, body("xgb-early-on", {**EARLY, "num_round": 400}, point))["result"]
    assert same["rounds"] == {"requested": 400, "trained": rounds, "kept": best + 1, "resumed_from": at}
    assert same["best_iteration"] == best and same["validation"] == pytest.approx(whole["validation"], rel=1e-6)

    # without early stopping every round stays (the checkpoint's best round does not cut the new job's trees)
    plain = {k: v for k, v in EARLY.items() if k != "early_stopping_rounds"}
    every = trained(svc, body("xgb-early-off", {**plain, "num_round": at + 5}, point))["result"]
    assert every["rounds"] == {"requested": at + 5, "trained": at + 5, "kept": at + 5, "resumed_from": at}

    # early stopping on another metric counts from the job's own first round, and says so
    with client(svc, "alice") as c:
        queued = c.post("/train", json=body("xgb-early-mae", {**EARLY, "num_round": 400, "eval_metric": "mae"}, point))
    assert queued.status_code == 202, queued.text
    said = f"params.early_stopping_rounds counts from this job's first round: checkpoint {point!r} early-stopped on "
    assert any(w.startswith(said) for w in queued.json()["warnings"]), queued.json()["warnings"]
    other = svc.wait(queued.json()["id"], {"SUCCEEDED", "FAILED"})
    assert other["status"] == "SUCCEEDED", other["error"]
    assert other["result"]["rounds"]["kept"] > at  # its best round is one of its own


def test_categorical_features_keep_the_checkpoints_categories(svc: Service) -> None:
    features = [f for f in TAXI_FEATURES if f != "rate_code"] + ["rate_name"]
    first = trained(svc, body("xgb-cat", {**PARAMS, "num_round": 6, "checkpoint_rounds": 3}, features=features,
                              categorical=["rate_name"]))  # fmt: skip
    point = checkpoints(svc, first["id"])[3]["id"]
    # data without the "negotiated" rides: its column stays, as the checkpoint's trees split on it
    job = trained(svc, body("xgb-cat-on", {**PARAMS, "num_round": 8}, point, uri="taxi-no5.parquet",
                            features=features, categorical=["rate_name"]))  # fmt: skip
    assert job["result"]["rounds"]["trained"] == 8
    before, after = registered(svc, "xgb-cat")[1], registered(svc, "xgb-cat-on")[1]
    assert after["categorical"] == before["categorical"] and after["features"] == before["features"]
    assert "negotiated" in after["categorical"]["levels"]["rate_name"]


def test_what_cannot_continue_a_checkpoint_is_a_422_and_writes_nothing(svc: Service, source: dict[str, Any]) -> None:
    from bench.chaos import digits_job

    point = source["checkpoints"][10]["id"]
    torch_job = trained(svc, digits_job("torch-beside-xgb", epochs=1, workers=1))
    torch_point = next(iter(checkpoints(svc, torch_job["id"]).values()))["id"]
    no_rate = [f for f in TAXI_FEATURES if f != "rate_code"]
    rates = {"label": "rate_code", "features": no_rate, "task": "classification"}
    classes = trained(svc, body("xgb-rates", {**PARAMS, "num_round": 4, "checkpoint_rounds": 2}, **rates))
    class_point = checkpoints(svc, classes["id"])[2]["id"]
    more = {**PARAMS, "num_round": 30}
    epochs = body("x", more, point)
    epochs["training"]["epochs"] = 3
    # (who asks, the body, the field named, what the detail says)
    cases = [
        ("alice", body("x", more, "0" * 32), "training.resume_from", "no checkpoint with id"),
        ("root", body("x", more, source["job"]["id"]), "training.resume_from", "that is a job's id; name one of its"),
        ("alice", body("x", more, torch_point), "training.resume_from",
         f"checkpoint {torch_point!r} belongs to a 'torch' job; an xgboost job continues only from an xgboost"),
        ("bob", body("x", more, point), "training.resume_from", f"no checkpoint with id {point!r}"),  # alice's
        ("alice", body("x", more, point, features=TAXI_FEATURES[:-1]), "dataset.features",
         "was trained on the features"),
        ("alice", body("x", more, point, label="h_distance", features=TAXI_FEATURES[:-1]), "dataset.label",
         "was trained on the label 'fare_amount', not 'h_distance'"),
        ("alice", body("x", more, point, **rates), "dataset.task", "was trained for regression"),
        ("alice", body("x", {**more, "objective": "reg:absoluteerror"}, point), "params.objective",
         "was trained with reg:squarederror"),
        ("alice", body("x", {**more, "booster": "dart"}, point), "params.booster",
         "is a gbtree model; xgboost would drop its trees"),
        ("alice", body("x", {**PARAMS, "num_round": 10}, point), "params.num_round", "already has 10 rounds"),
        ("alice", body("x", {**PARAMS, "n_estimators": 5}, point), "params.n_estimators", "ask for more than 10"),
        ("alice", body("x", more, point, categorical=["rate_code"]), "dataset.categorical",
         "was trained with no categorical columns; this request has ['rate_code']"),
        ("alice", body("x", {**PARAMS, "num_round": 8}, class_point, uri="taxi-no5.parquet", **rates, num_classes=4),
         "dataset.num_classes", "was trained on 6 classes (labels 0..5); continuing it keeps them: set "
         "dataset.num_classes to 6, or leave it out"),
        ("alice", epochs, "training.epochs", "xgboost takes only resume_from in training"),
    ]  # fmt: skip

    before = [j["id"] for j in svc.client.get("/jobs", params={"limit": 500}).json()["items"]]
    for owner, payload, loc, said in cases:
        with client(svc, owner) as c:
            refused = problem(c.post("/train", json=payload), 422)
        assert [e["loc"] for e in refused["errors"]] == [loc], (loc, refused)
        assert said in refused["detail"], (said, refused["detail"])
    after = [j["id"] for j in svc.client.get("/jobs", params={"limit": 500}).json()["items"]]
    assert after == before  # no job written, nothing queued
    assert svc.client.get("/models/x").status_code == 404


def test_a_checkpoint_without_its_card_is_read_from_its_jobs_plan(svc: Service, source: dict[str, Any]) -> None:
    """A checkpoint written before cards were (an earlier release): what it was trained on is its job's plan."""
    checkpoint = source["checkpoints"][20]
    (storage.fetch_dir(checkpoint["uri"]) / "card.json").unlink()
    with client(svc, "alice") as c:
        wrong = body("xgb-old", PARAMS | {"num_round": 22}, checkpoint["id"], features=TAXI_FEATURES[1:])
        refused = problem(c.post("/train", json=wrong), 422)
    assert refused["errors"][0]["loc"] == "dataset.features", refused
    job = trained(svc, body("xgb-old", PARAMS | {"num_round": 22}, checkpoint["id"]))
    assert job["result"]["rounds"] == {"requested": 22, "trained": 22, "kept": 22, "resumed_from": 20}


def test_early_stopping_on_other_validation_rows_counts_from_the_jobs_first_round(svc: Service) -> None:
    """The checkpoint's best score was measured on taxi-eval; one on other rows (fares over 20, a larger error) is
    not comparable: the new job keeps the rounds that improve its own metric (it stopped 3 rounds after the
    checkpoint, keeping none of its own, as none beat a score of other rows)."""
    early = {"learning_rate": 0.6, "max_depth": 3, "num_workers": 1, "early_stopping_rounds": 3}
    first = trained(svc, body("xgb-es-source", {**early, "num_round": 10, "checkpoint_rounds": 5}))
    at = max(checkpoints(svc, first["id"]))
    point = checkpoints(svc, first["id"])[at]["id"]
    hard = {**body("xgb-es-hard", {**early, "learning_rate": 0.3, "num_round": at + 30}, point,
                   uri="taxi-train-hard.parquet"), "validation": {"uri": "taxi-eval-hard.parquet"}}  # fmt: skip
    with client(svc, "alice") as c:
        queued = c.post("/train", json=hard)
    assert queued.status_code == 202, queued.text
    job = svc.wait(queued.json()["id"], {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED", job["error"]
    rounds = job["result"]["rounds"]
    assert rounds["resumed_from"] == at and rounds["kept"] > at, rounds  # its best round is one of its own
    assert job["result"]["best_iteration"] >= at, job["result"]
    said = f"params.early_stopping_rounds counts from this job's first round: checkpoint {point!r}'s best score"
    assert any(w.startswith(said) and "taxi-eval-hard.parquet" in w for w in queued.json()["warnings"]), queued.json()


def test_data_lacking_some_of_the_checkpoints_classes_continues_it(svc: Service) -> None:
    """A 6-class checkpoint (rate codes 1, 2, 3 and 5) goes on with a month without code 5: the model keeps its 6
    classes, with dataset.num_classes left out or given as 6 (both were a 422 that sent the user to the other)."""
    no_rate = [f for f in TAXI_FEATURES if f != "rate_code"]
    rates = {"label": "rate_code", "features": no_rate, "task": "classification"}
    first = trained(svc, body("xgb-six", {**PARAMS, "num_round": 4, "checkpoint_rounds": 2}, **rates))
    point = checkpoints(svc, first["id"])[2]["id"]
    for name, given in (("xgb-six-on", {}), ("xgb-six-on-6", {"num_classes": 6})):
        with client(svc, "alice") as c:
            queued = c.post("/train", json=body(name, {**PARAMS, "num_round": 6}, point, uri="taxi-no5.parquet",
                                                **rates, **given))  # fmt: skip
        assert queued.status_code == 202, queued.text
        assert any("no rows of class 0, 4, 5" in w for w in queued.json()["warnings"]), queued.json()["warnings"]
        job = svc.wait(queued.json()["id"], {"SUCCEEDED", "FAILED"})
        assert job["status"] == "SUCCEEDED", job["error"]
        assert job["result"]["rounds"] == {"requested": 6, "trained": 6, "kept": 6, "resumed_from": 2}
        card = registered(svc, name)[1]
        assert card["num_classes"] == 6, card


def test_a_checkpoint_whose_files_are_gone_is_a_422(svc: Service, source: dict[str, Any]) -> None:
    """It was accepted, and the job failed SPARK_ERROR with xgboost's C++ backtrace."""
    checkpoint = source["checkpoints"][10]
    directory = storage.fetch_dir(checkpoint["uri"])
    moved = directory.with_name(directory.name + "-moved")
    directory.rename(moved)
    try:
        before = [j["id"] for j in svc.client.get("/jobs", params={"limit": 500}).json()["items"]]
        with client(svc, "alice") as c:
            refused = problem(c.post("/train", json=body("xgb-gone", {**PARAMS, "num_round": 12}, checkpoint["id"])),
                              422)  # fmt: skip
        assert [e["loc"] for e in refused["errors"]] == ["training.resume_from"], refused
        assert f"the files of checkpoint {checkpoint['id']!r} are gone" in refused["detail"], refused["detail"]
        assert [j["id"] for j in svc.client.get("/jobs", params={"limit": 500}).json()["items"]] == before
    finally:
        moved.rename(directory)
