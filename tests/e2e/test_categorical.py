"""Categorical features through the real service (``dataset.categorical``): xgboost, Spark ML and torch one-hot
encode a text column and a whole-number column by the categories of the training rows, the model records them, and
batch and online prediction and evaluation feed the model the same columns from the same raw rows (an unseen
category as all zeros)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pandas as pd
import pytest

from tests.helpers import Service, running_service

pytestmark = pytest.mark.slow
OFFSET = {"north": 0.0, "south": 15.0, "east": -10.0}


def _rows(n: int, seed: int) -> pd.DataFrame:
    """A fare whose level depends on the city (text) and the tier (a whole number): the distance alone explains
    little of it."""
    rng = np.random.default_rng(seed)
    city = rng.choice(list(OFFSET), n)
    tier = rng.integers(1, 4, n)
    distance = rng.uniform(0, 10, n)
    fare = 2 * distance + np.array([OFFSET[c] for c in city]) + 4.0 * tier + rng.normal(0, 0.2, n)
    return pd.DataFrame({"distance": distance, "city": city, "tier": tier, "fare": fare})


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    base = tmp_path_factory.mktemp("categorical")
    data = base / "data"
    data.mkdir()
    _rows(1200, 1).to_csv(data / "fares.csv", index=False)
    _rows(300, 2).to_csv(data / "fares-eval.csv", index=False)
    _rows(50, 5).rename(columns={"city": "ci.ty"}).to_csv(data / "dotted.csv", index=False)
    with running_service(spark, base, data_roots=[data]) as service:
        yield service


def _train(svc: Service, name: str, framework: str, family: dict[str, Any], **dataset: Any) -> dict[str, Any]:
    body = {
        "name": name,
        "framework": framework,
        "dataset": {"uri": "fares.csv", "features": ["distance", "city", "tier"], "label": "fare",
                    "task": "regression", "categorical": ["city", "tier"], **dataset},
        **family,
    }  # fmt: skip
    job = svc.wait(svc.train(body)["id"], {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=600)
    assert job["status"] == "SUCCEEDED", job["error"]
    return job


FAMILIES = [
    ("xgboost", {"params": {"num_round": 60, "max_depth": 3, "num_workers": 1}}),
    ("spark_ml", {"params": {"algorithm": "linear_regression"}}),
    (
        "torch",
        {
            "network": {
                "layers": [
                    {"type": "dense", "units": 16, "activation": "relu"},
                    {"type": "output", "units": 1, "activation": "identity", "loss": "mse"},
                ]
            },
            "training": {
                "epochs": 40,
                "batch_size_per_worker": 32,
                "num_workers": 2,
                "optimizer": {"type": "adam", "learning_rate": 0.01},
            },
        },
    ),
]
"""(framework, what its body adds to the dataset)"""


@pytest.mark.parametrize(("framework", "family"), FAMILIES)
def test_a_categorical_feature_is_one_hot_encoded(svc: Service, framework: str, family: dict[str, Any]) -> None:
    job = _train(svc, f"fares-{framework}", framework, family)
    validation = job["result"]["validation"]  # the distance alone: an r2 of about 0.3 (the fare's spread: ~12)
    assert validation["r2"] > 0.98 if framework != "torch" else validation["rmse"] < 1.0, validation
    lines = [line["message"] for line in svc.client.get(f"/jobs/{job['id']}/logs").json()["lines"]]
    assert "one-hot encoded city (3 categories), tier (3 categories): 7 features" in lines, lines
    version = svc.client.get(f"/models/fares-{framework}/versions/1").json()
    card = version["params"]
    assert card["categorical"] == {"inputs": ["distance", "city", "tier"], "types": {"city": "string", "tier": "int"},
                                   "levels": {"city": ["east", "north", "south"], "tier": ["1", "2", "3"]}}  # fmt: skip
    assert card["features"] == ["distance", "city=east", "city=north", "city=south", "tier=1", "tier=2", "tier=3"]
    taken = version["signature"]["inputs"]  # what /predict and the CLI send: the request's columns
    assert [(c["name"], c["type"], c.get("categorical")) for c in taken] == [
        ("distance", "double", None), ("city", "string", True), ("tier", "long", True)]  # fmt: skip
    example = json.loads((Path(urlparse(version["artifact_uri"]).path) / "input_example.json").read_text())
    assert example["columns"] == card["features"]  # what MLflow's flavors feed the model: the one-hot columns
    assert all(v in (0.0, 1.0) for row in example["data"] for v in row[1:])
    if framework == "xgboost":
        assert job["result"]["feature_importance"]["gain"]["city=south"] > 0
        import xgboost

        booster = xgboost.Booster(model_file=str(Path(urlparse(version["artifact_uri"]).path) / "model.json"))
        plain = booster.predict(xgboost.DMatrix(pd.DataFrame(example["data"], columns=example["columns"])))
        rows = card["input_example"]  # the training rows' own columns (city as text)
        assert rows and set(rows[0]) == {"distance", "city", "tier"}, rows
        ours = svc.client.post("/predict", json={"model": {"name": f"fares-{framework}"}, "dataframe_records": rows})
        assert np.allclose(plain, ours.json()["predictions"], atol=1e-4), (plain, ours.json())
    if framework == "torch":  # the archive's loader (no sparktrain) takes the one-hot columns, as MLflow's do,
        from workers.inference import standalone  # and the training rows' own columns, which it encodes

        loaded = standalone.load(Path(urlparse(version["artifact_uri"]).path))
        plain = loaded.predict(np.array(example["data"], dtype=np.float32))["prediction"]
        assert loaded.predict(card["input_example"])["prediction"] == plain
        ours = svc.client.post("/predict", json={"model": {"name": f"fares-{framework}"},
                                                 "dataframe_records": card["input_example"]})  # fmt: skip
        assert np.allclose(plain, ours.json()["predictions"], atol=1e-4), (plain, ours.json())
        import io
        import zipfile

        import onnxruntime as ort

        onnx = svc.client.get(f"/models/fares-{framework}/versions/1/artifact", params={"format": "onnx"})
        assert onnx.status_code == 200, onnx.text
        with zipfile.ZipFile(io.BytesIO(onnx.content)) as archive:
            graph = archive.read(f"fares-{framework}-v1-onnx/model.onnx")
            sidecar = json.loads(archive.read(f"fares-{framework}-v1-onnx/sparktrain_onnx.json"))
        assert sidecar["features"] == card["features"] and sidecar["categorical"] == card["categorical"], sidecar
        session = ort.InferenceSession(graph)
        out = session.run(None, {"input": np.array(example["data"], dtype=np.float32)})[0]
        assert np.allclose(out[:, 0], ours.json()["predictions"], atol=1e-4), (out, ours.json())


def test_a_categorical_column_must_be_a_feature_of_a_family_that_takes_it(svc: Service) -> None:
    dataset = {"uri": "fares.csv", "features": ["distance", "city"], "label": "fare", "task": "regression"}
    base = {"name": "refused", "framework": "xgboost", "params": {"num_round": 5}, "dataset": dataset}
    cases = [
        ({"categorical": ["tier"]}, {}, "dataset.categorical[0]: 'tier' is not one of dataset.features"),
        ({"categorical": ["distance"]}, {}, "dataset.categorical[0]: 'distance' is double; a categorical column"),
        ({"categorical": ["city", "city"]}, {}, "dataset.categorical: a column is listed twice"),
        ({"categorical": ["city", "city"], "features": None}, {}, "dataset.categorical: a column is listed twice"),
        ({"uri": "dotted.csv", "features": ["distance", "ci.ty"], "categorical": ["ci.ty"]}, {},
         "dataset.features[1]: 'ci.ty': Spark reads '.' in a column name"),
        ({"categorical": ["city"], "input_shape": [2]}, {"framework": "torch", "params": None, "network": {
            "layers": [{"type": "output", "units": 1, "activation": "identity", "loss": "mse"}]}},
         "dataset.categorical: one-hot columns are features of a row: they do not combine with dataset.input_shape"),
        # data the driver cannot read (a reader option): still a 422 at once, not a job that fails
        ({"categorical": ["city"], "input_shape": [2], "options": {"lineSep": "\n"}}, {"framework": "torch",
          "params": None, "network": {"layers": [{"type": "output", "units": 1, "activation": "identity",
                                                   "loss": "mse"}]}}, "do not combine with dataset.input_shape"),
    ]  # fmt: skip
    for dataset, top, words in cases:
        body = {**base, **top, "dataset": {k: v for k, v in {**base["dataset"], **dataset}.items() if v is not None}}
        answer = svc.client.post("/train", json={k: v for k, v in body.items() if v is not None})
        assert answer.status_code == 422, answer.text
        assert words in answer.json()["detail"], (words, answer.json()["detail"])


def test_a_torch_job_reads_the_categories_the_request_could_not(svc: Service) -> None:
    """A reader option the driver's sample reader does not know leaves the plan to the job, which reads the
    categories with Spark before it plans the network."""
    torch = dict(FAMILIES)["torch"]
    family = {**torch, "training": {**torch["training"], "epochs": 2}}
    job = _train(svc, "fares-torch-deferred", "torch", family, options={"lineSep": "\n"})
    card = svc.client.get("/models/fares-torch-deferred/versions/1").json()["params"]
    assert card["categorical"]["levels"] == {"city": ["east", "north", "south"], "tier": ["1", "2", "3"]}, card
    assert card["input_shape"] == [7], card
    assert job["result"]["rows"]["train"] > 0, job["result"]


def test_a_fine_tuned_network_keeps_the_categories_its_first_layer_was_trained_on(svc: Service) -> None:
    """New data without one category and with another: the source's columns keep their meaning (it was accepted
    with the columns shifted, north read as south)."""
    torch = dict(FAMILIES)["torch"]
    if not svc.client.get("/models/fares-torch").is_success:
        _train(svc, "fares-torch", "torch", torch)
    rows = _rows(400, 7)
    rows["city"] = rows["city"].replace({"east": "west"})
    rows.to_csv(svc.app.state.runtime.settings.data_roots[0] / "fares-west.csv", index=False)
    still = {"learning_rate": 1e-12}  # the weights barely move: the same inputs must give the same answers
    family = {**torch, "training": {**torch["training"], "epochs": 1, "optimizer": {"type": "sgd", **still},
                                    "init_from": {"name": "fares-torch"}}}  # fmt: skip
    _train(svc, "fares-tuned", "torch", family, uri="fares-west.csv")
    card = svc.client.get("/models/fares-tuned/versions/1").json()["params"]
    assert card["categorical"]["levels"]["city"] == ["east", "north", "south"], card["categorical"]
    probe = [{"distance": 3.0, "city": city, "tier": 2} for city in ("north", "south", "east", "west")]
    before, after = ({"model": {"name": name}, "dataframe_records": probe} for name in ("fares-torch", "fares-tuned"))
    old, new = (svc.client.post("/predict", json=body).json()["predictions"] for body in (before, after))
    assert new == pytest.approx(old, abs=1e-3), (old, new)
    other = {**family, "dataset": None}
    refused = svc.client.post("/train", json={**other, "name": "fares-other", "framework": "torch", "dataset": {
        "uri": "fares.csv", "features": ["distance", "city", "tier"], "label": "fare", "task": "regression",
        "categorical": ["city"]}})  # fmt: skip
    assert refused.status_code == 422, refused.text
    assert "with ['city', 'tier'] categorical; this request has" in refused.json()["detail"], refused.text


def test_by_default_the_features_keep_the_files_order(svc: Service) -> None:
    """Numeric columns and the categorical ones, as the file has them: a list row follows that order (the
    categorical columns were appended after the numeric ones)."""
    dataset = {"uri": "fares.csv", "label": "fare", "task": "regression", "categorical": ["city"]}
    body = {"name": "fares-default", "framework": "xgboost", "params": {"num_round": 5, "num_workers": 1},
            "dataset": dataset}  # fmt: skip
    job = svc.wait(svc.train(body)["id"], {"SUCCEEDED", "FAILED"})
    assert job["status"] == "SUCCEEDED", job["error"]
    card = svc.client.get("/models/fares-default/versions/1").json()["params"]
    assert card["categorical"]["inputs"] == ["distance", "city", "tier"], card["categorical"]
    answer = svc.client.post("/predict", json={"model": {"name": "fares-default"}, "inputs": [[3.0, "south", 2]]})
    assert answer.status_code == 200, answer.text


def test_more_categories_than_a_column_may_hold_fails_the_job(svc: Service, tmp_path: Path) -> None:
    rows = _rows(1500, 3)  # 1,200 training rows (20% held out)
    rows["trip"] = [f"t{i}" for i in range(len(rows))]
    rows.to_csv(svc.app.state.runtime.settings.data_roots[0] / "trips.csv", index=False)
    job = svc.wait(svc.train({"name": "ids", "framework": "xgboost", "params": {"num_round": 5, "num_workers": 1},
                              "dataset": {"uri": "trips.csv", "features": ["distance", "trip"], "label": "fare",
                                          "task": "regression", "categorical": ["trip"]}})["id"],
                   {"SUCCEEDED", "FAILED"})  # fmt: skip
    assert job["status"] == "FAILED" and job["error"]["reason"] == "INVALID_REQUEST", job
    assert "'trip' has more than 1000 distinct values" in job["error"]["message"], job["error"]


def _expected(rows: list[dict[str, Any]]) -> np.ndarray:
    return np.array([2 * r["distance"] + OFFSET[r["city"]] + 4.0 * r["tier"] for r in rows])


@pytest.mark.parametrize(("framework", "family"), FAMILIES)
def test_online_rows_are_encoded_as_in_training(svc: Service, framework: str, family: dict[str, Any]) -> None:
    name = f"fares-{framework}"
    if not svc.client.get(f"/models/{name}").is_success:
        _train(svc, name, framework, family)
    rows = [{"distance": 3.0, "city": "south", "tier": 2}, {"distance": 7.5, "city": "east", "tier": 3},
            {"distance": 1.0, "city": "north", "tier": 1}]  # fmt: skip
    answer = svc.client.post("/predict", json={"model": {"name": name}, "dataframe_records": rows})
    assert answer.status_code == 200, answer.text
    got = np.array(answer.json()["predictions"], dtype=float).reshape(-1)
    assert np.abs(got - _expected(rows)).max() < 1.5, (got, _expected(rows))
    positional = svc.client.post("/predict", json={"model": {"name": name}, "inputs": [[3.0, "south", 2]]})
    assert positional.status_code == 200, positional.text
    assert positional.json()["predictions"][0] == pytest.approx(got[0], abs=1e-4)
    # a whole-number category is its number however it is written (a CSV reader's "2", pandas' 2.0)
    written = [{"distance": 3.0, "city": "south", "tier": tier} for tier in ("2", 2.0, " 02")]
    same = svc.client.post("/predict", json={"model": {"name": name}, "dataframe_records": written})
    assert same.json()["predictions"] == pytest.approx([got[0]] * 3, abs=1e-4), same.text
    # a category the training rows did not have is all zeros: the model still answers (no offset for "west")
    unseen = svc.client.post("/predict", json={"model": {"name": name}, "dataframe_records": [
        {"distance": 3.0, "city": "west", "tier": 2}]})  # fmt: skip
    assert unseen.status_code == 200, unseen.text
    for bad, words in [
        ({"distance": 3.0, "city": None, "tier": 2}, "city is null; a categorical feature needs a category"),
        ({"distance": 3.0, "city": [1], "tier": 2}, "is not a category"),
        ({"distance": 3.0, "city": "east", "tier": "two"}, 'tier: "two" is not a whole number'),
        ({"distance": 3.0, "city": "east", "tier": True}, "tier: true is a boolean"),
        ({"distance": "far", "city": "east", "tier": 2}, "'distance'"),
        ({"distance": 3.0, "town": "east", "tier": 2}, "missing features ['city']"),
    ]:
        refused = svc.client.post("/predict", json={"model": {"name": name}, "dataframe_records": [bad]})
        assert refused.status_code == 422, refused.text
        assert words in refused.json()["detail"], (words, refused.json()["detail"])
    v2 = svc.client.post(f"/v2/models/{name}/infer", json={"inputs": [
        {"name": "input", "shape": [1, 3], "datatype": "FP32", "data": [3.0, 1.0, 2.0]}]})  # fmt: skip
    assert v2.status_code == 422 and "POST /predict with dataframe_records" in v2.json()["detail"], v2.text
    meta = svc.client.get(f"/v2/models/{name}").json()  # it advertised the one-hot tensor that infer refuses
    assert meta["inputs"] == [] and "POST /predict" in meta["parameters"]["v2_infer"], meta


@pytest.mark.parametrize(("framework", "family"), FAMILIES)
def test_batch_prediction_and_evaluation_encode_the_raw_rows(
    svc: Service, framework: str, family: dict[str, Any]
) -> None:
    name = f"fares-{framework}"
    if not svc.client.get(f"/models/{name}").is_success:
        _train(svc, name, framework, family)
    evaluated = svc.wait(svc.client.post("/evaluate", json={"model": {"name": name}, "dataset": {
        "uri": "fares-eval.csv"}, "metrics": ["regression"]}).json()["id"], {"SUCCEEDED", "FAILED"})  # fmt: skip
    assert evaluated["status"] == "SUCCEEDED", evaluated["error"]
    fare = evaluated["result"]["regression"]["columns"]["fare"]
    assert fare["r2"] > 0.98 and evaluated["result"]["rows"] == 300, evaluated["result"]
    data = svc.app.state.runtime.settings.data_roots[0]
    keyed = _rows(50, 4).assign(trip=range(50))
    keyed.loc[0, "city"] = "west"  # unseen: all zeros, still predicted
    keyed.to_csv(data / "fares-keyed.csv", index=False)
    job = svc.client.post("/predict", json={"model": {"name": name}, "dataset": {"uri": "fares-keyed.csv",
                          "key": "trip"}, "output_uri": f"out-{framework}"})  # fmt: skip
    assert job.status_code == 202, job.text
    done = svc.wait(job.json()["id"], {"SUCCEEDED", "FAILED"})
    assert done["status"] == "SUCCEEDED" and done["result"]["rows"] == 50, done
    out = pd.read_parquet(done["result"]["output_uri"]).sort_values("trip")
    expected = _expected(keyed.to_dict("records")[1:])
    assert np.abs(out["prediction"].to_numpy()[1:] - expected).max() < 1.5
    # a tier the model's whole-number column cannot hold: a bad row with its reason (batch prediction scored it as
    # an unseen category; evaluation named no reason)
    keyed.astype({"tier": str}).assign(tier=lambda f: ["x", *f["tier"][1:]]).to_csv(data / "fares-x.csv", index=False)
    failed = svc.wait(svc.client.post("/evaluate", json={"model": {"name": name}, "dataset": {
        "uri": "fares-x.csv"}, "metrics": ["regression"]}).json()["id"], {"SUCCEEDED", "FAILED"})  # fmt: skip
    assert failed["status"] == "FAILED" and failed["error"]["reason"] == "BAD_ROWS", failed
    if framework != "spark_ml":  # (its bad rows are counted by Spark ML's own pass)
        assert "not a whole number: 'x' (tier)" in failed["error"]["message"], failed["error"]
    body = {"model": {"name": name}, "dataset": {"uri": "fares-x.csv", "key": "trip"}, "output_uri": f"x-{framework}"}
    batch = svc.wait(svc.client.post("/predict", json=body).json()["id"], {"SUCCEEDED", "FAILED"})
    assert batch["status"] == "FAILED" and "not a whole number: 'x' (tier)" in batch["error"]["message"], batch
    # the model's columns are said to be the data's problem: the request named no features and no categorical
    keyed.astype({"tier": float}).to_csv(data / "fares-double.csv", index=False)
    keyed.drop(columns="city").to_csv(data / "fares-no-city.csv", index=False)
    for uri, words in [
        ("fares-double.csv", "the model's input columns: 'tier' is double; a categorical column holds"),
        ("fares-no-city.csv", "the model's input columns: no column 'city' in fares-no-city.csv"),
    ]:
        refused = svc.client.post("/evaluate", json={"model": {"name": name}, "dataset": {"uri": uri}})
        assert refused.status_code == 422, refused.text
        assert [e["loc"] for e in refused.json()["errors"]] == ["dataset.uri"], refused.text
        assert words in refused.json()["detail"], refused.text
