"""The record pipeline under the torch trainer: string labels, normalizers saved with the model, weights,
several label columns, data larger than one partition per worker, and an empty dataset."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pandas as pd
import pytest

from tests.helpers import TAXI_FEATURES, Service
from workers.training.torch.export import MANIFEST

REPO = Path(__file__).resolve().parents[2]
NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
MLP = {"layers": [{"type": "dense", "units": 64, "activation": "relu"},
                  {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}]}  # fmt: skip


@pytest.fixture
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    digits = pd.read_parquet(REPO / "datasets/digits/train.parquet")
    named = digits.assign(label=[NAMES[i] for i in digits["label"]])
    named.to_parquet(root / "digits-named.parquet")
    taxi = pd.read_parquet(REPO / "datasets/taxi/train.parquet")
    taxi = taxi.assign(weight=np.where(taxi["rate_code"] == 1, 1.0, 0.5))
    (root / "taxi-parts").mkdir()
    for i in range(6):  # more input partitions than workers
        part = taxi.iloc[i * len(taxi) // 6 : (i + 1) * len(taxi) // 6]
        part.to_parquet(root / "taxi-parts" / f"part-{i}.parquet")
    taxi.head(0).to_parquet(root / "empty.parquet")
    return root


@pytest.fixture
def service(make_service: Callable[..., Any], data: Path) -> Iterator[Service]:
    with make_service(data_roots=[data, REPO / "datasets"]) as svc:
        yield svc


def _done(service: Service, body: dict[str, Any]) -> dict[str, Any]:
    job = service.wait(service.train(body)["id"], {"SUCCEEDED", "FAILED"}, timeout=600)
    assert job["status"] == "SUCCEEDED", job["error"]
    return job


def _model_dir(service: Service, job: dict[str, Any]) -> Path:
    version = service.client.get(f"/models/{job['model']['name']}/versions/{job['model']['version']}").json()
    return Path(urlparse(version["artifact_uri"]).path)


def test_string_labels_and_image_scaling(service: Service) -> None:
    body = {
        "name": "named-digits",
        "framework": "torch",
        "dataset": {"uri": "digits-named.parquet", "features": ["pixels"], "label": "label",
                    "task": "classification", "normalize": "image",
                    "split": {"validation_fraction": 0.2, "seed": 3}},
        "network": MLP,
        "training": {"epochs": 8, "batch_size_per_worker": 32, "num_workers": 2,
                     "optimizer": {"type": "adam", "learning_rate": 0.003}},
    }  # fmt: skip
    job = _done(service, body)
    assert job["result"]["validation"]["accuracy"] > 0.9
    assert job["result"]["rows"]["validation"] > 250  # 20 % of 1,437 held out
    card = json.loads((_model_dir(service, job) / "spec.json").read_text())
    assert card["class_labels"] == sorted(NAMES)  # the index of a class is its place in sorted order
    assert card["num_classes"] == 10
    assert card["normalizer"]["kind"] == "image" and card["normalizer"]["scale"] == [16.0]
    version = service.client.get("/models/named-digits/versions/1").json()
    assert version["params"]["class_labels"] == sorted(NAMES)
    # the mapping round-trips: predictions come back as the names the data used
    digits = pd.read_parquet(REPO / "datasets/digits/test.parquet").head(50)
    online = service.client.post(
        "/predict",
        json={"model": {"name": "named-digits"}, "instances": [list(map(float, p)) for p in digits["pixels"]]},
    )
    assert online.status_code == 200, online.text
    hits = sum(name == NAMES[i] for name, i in zip(online.json()["predictions"], digits["label"], strict=True))
    assert hits >= 40


def test_standardized_weighted_multi_output_regression_from_many_files(service: Service) -> None:
    body = {
        "name": "taxi-two-targets",
        "framework": "torch",
        "dataset": {"uri": "taxi-parts", "features": [f for f in TAXI_FEATURES if f != "h_distance"],
                    "label": ["fare_amount", "h_distance"], "task": "regression", "weight": "weight",
                    "normalize": "standardize"},
        "validation": {"uri": "taxi/eval.parquet"},
        "network": {"layers": [{"type": "dense", "units": 64, "activation": "relu"},
                               {"type": "output", "units": 2, "activation": "identity", "loss": "mse"}]},
        "training": {"epochs": 15, "batch_size_per_worker": 64, "num_workers": 2,
                     "optimizer": {"type": "adam", "learning_rate": 0.01}},
    }  # fmt: skip
    job = _done(service, body)
    assert job["result"]["rows"]["train"] == 8000
    card = json.loads((_model_dir(service, job) / "spec.json").read_text())
    assert card["labels"] == ["fare_amount", "h_distance"]
    taxi = pd.read_parquet(REPO / "datasets/taxi/train.parquet")
    features = taxi[[f for f in TAXI_FEATURES if f != "h_distance"]]
    np.testing.assert_allclose(card["normalizer"]["shift"], features.mean().to_numpy(), rtol=1e-6)
    np.testing.assert_allclose(card["normalizer"]["scale"], features.std(ddof=0).to_numpy(), rtol=1e-6)
    spread = float(np.sqrt(((taxi[["fare_amount", "h_distance"]] - taxi[["fare_amount", "h_distance"]].mean())
                            ** 2).to_numpy().mean()))  # fmt: skip
    assert job["result"]["validation"]["rmse"] < 0.5 * spread


def test_empty_dataset_or_too_few_rows_for_the_batches_is_a_422(service: Service) -> None:
    body = {
        "name": "empty",
        "framework": "torch",
        "dataset": {"uri": "empty.parquet", "features": ["trip_distance"], "label": "fare_amount",
                    "task": "regression"},
        "network": {"layers": [{"type": "output", "units": 1, "activation": "identity", "loss": "mse"}]},
    }  # fmt: skip
    before = len(service.client.get("/jobs", params={"limit": 500}).json()["items"])
    empty = service.client.post("/train", json=body)
    assert empty.status_code == 422, empty.text
    assert empty.json()["errors"][0]["loc"] == "dataset.uri" and "has no rows" in empty.json()["detail"]
    # digits' 1,437 rows, about 144 held out: two workers cannot take 700 each (the footers say so)
    digits = {"uri": "digits/train.parquet", "features": ["pixels"], "label": "label", "task": "classification"}
    output = {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"}
    body = {**body, "dataset": digits, "network": {"layers": [output]},
            "training": {"num_workers": 2, "batch_size_per_worker": 700}}  # fmt: skip
    large = service.client.post("/train", json=body)
    assert large.status_code == 422, large.text
    assert large.json()["errors"][0]["loc"] == "training.batch_size_per_worker"
    assert "1,437 rows, about 144 of them held out" in large.json()["detail"], large.json()
    assert len(service.client.get("/jobs", params={"limit": 500}).json()["items"]) == before  # nothing written


def test_export_path_is_reused_and_trains_identically(service: Service) -> None:
    """DL4J's Export: the first job writes per-worker tensor shards, a later job on the same data trains from
    them without reading the source, and both give bitwise the weights of the direct path."""
    from safetensors.torch import load_file

    def body(name: str, path: str) -> dict[str, Any]:
        return {
            "name": name,
            "framework": "torch",
            "dataset": {"uri": "digits/train.parquet", "features": ["pixels"], "label": "label",
                        "task": "classification", "num_classes": 10, "normalize": "standardize"},
            "validation": {"uri": "digits/test.parquet"},
            "network": MLP,
            "training": {"epochs": 2, "batch_size_per_worker": 32, "num_workers": 2, "data_path": path,
                         "optimizer": {"type": "adam", "learning_rate": 0.003}},
        }  # fmt: skip

    def logs(job: dict[str, Any]) -> str:
        return "\n".join(line["message"] for line in service.client.get(f"/jobs/{job['id']}/logs").json()["lines"])

    direct = _done(service, body("direct", "direct"))
    first = _done(service, body("export-1", "export"))
    again = _done(service, body("export-2", "export"))
    assert "exported the prepared tensors" in logs(first)
    assert "training from exported tensors" in logs(again)
    assert first["id"] not in logs(again)  # the job that made them may be another owner's (audit, 2026-12-06)
    weights = [load_file(str(_model_dir(service, job) / "weights.safetensors")) for job in (direct, first, again)]
    for other in weights[1:]:
        assert all(bool((weights[0][k] == other[k]).all()) for k in weights[0])
    card = json.loads((_model_dir(service, again) / "spec.json").read_text())
    assert card["normalizer"]["kind"] == "standardize"  # the normalizer travels with the export
    # so does the model card's input example: a job on an export runs no Spark job to read one from the data
    example = json.loads((_model_dir(service, direct) / "spec.json").read_text())["input_example"]
    assert example and card["input_example"] == example
    manifests = (service.runtime.settings.artifact_root / "exports").glob(f"*/{MANIFEST}")
    assert any(json.loads(m.read_text()).get("input_example") == example for m in manifests)


def test_an_export_that_cannot_be_written_costs_the_export_not_the_job(service: Service) -> None:
    """The shards are written while the ranks train: a write that fails (here the export root is a file) leaves the
    job SUCCEEDED with a warning naming the failure, no manifest, and the next job prepares the data again."""
    exports = service.runtime.settings.artifact_root / "exports"
    aside = exports.with_name("exports-aside")
    if exports.exists():
        exports.rename(aside)
    exports.write_text("not a directory")
    try:
        body = {
            "name": "export-fails",
            "framework": "torch",
            "dataset": {"uri": "digits/train.parquet", "features": ["pixels"], "label": "label",
                        "task": "classification", "num_classes": 10},
            "network": MLP,
            "training": {"epochs": 1, "batch_size_per_worker": 32, "num_workers": 2, "data_path": "export"},
        }  # fmt: skip
        job = _done(service, body)
        assert any("were not exported" in w and "could not write" in w for w in job["warnings"]), job["warnings"]
        again = _done(service, {**body, "name": "export-fails-again"})
        lines = service.client.get(f"/jobs/{again['id']}/logs").json()["lines"]
        assert not any("training from exported tensors" in line["message"] for line in lines)
    finally:
        exports.unlink()
        if aside.exists():
            aside.rename(exports)


LSTM_BODY: dict[str, Any] = {
    "name": "sequences-lstm",
    "framework": "torch",
    "dataset": {"uri": "sequences/train.parquet", "features": ["f0", "f1", "f2"], "label": "label",
                "task": "classification", "num_classes": 3,
                "sequence": {"layout": "rows", "sequence_id": "sequence_id", "step": "step",
                             "labels": "last_step", "alignment": "ALIGN_END"}},
    "validation": {"uri": "sequences/test.parquet"},
    "network": {"layers": [{"type": "lstm", "units": 32},
                           {"type": "output", "units": 3, "activation": "softmax", "loss": "cross_entropy"}]},
    "training": {"epochs": 30, "batch_size_per_worker": 32, "num_workers": 2,
                 "optimizer": {"type": "adam", "learning_rate": 0.01}},
}  # fmt: skip


def test_lstm_learns_the_shipped_sequences(service: Service) -> None:
    job = _done(service, LSTM_BODY)
    assert job["result"]["rows"] == {"train": 800, "validation": 200, "bad_rows": 0}
    assert job["result"]["validation"]["accuracy"] >= 0.9, job["result"]["validation"]


def _per_step_data(data: Path) -> None:
    rng = np.random.default_rng(5)
    feats, labels = [], []
    for sid in range(300):
        n = int(rng.integers(4, 12))
        x = rng.normal(size=n)
        feats += [{"sequence_id": sid, "step": t, "v": float(x[t])} for t in range(n)]
        k = int(rng.integers(2, n + 1))  # labels for the last k steps only: the sign of the running sum
        running = np.cumsum(x)
        labels += [{"sequence_id": sid, "step": t, "label": int(running[n - k + t] > 0)} for t in range(k)]
    pd.DataFrame(feats).to_parquet(data / "steps.parquet")
    pd.DataFrame(labels).to_parquet(data / "step-labels.parquet")


def _per_step_body() -> dict[str, Any]:
    return {
        "name": "per-step",
        "framework": "torch",
        "dataset": {"uri": "steps.parquet", "features": ["v"], "label": "label", "task": "classification",
                    "num_classes": 2, "split": {"validation_fraction": 0.2, "seed": 1},
                    "sequence": {"labels": "per_step", "alignment": "ALIGN_END",
                                 "labels_uri": "step-labels.parquet"}},
        "network": {"layers": [{"type": "lstm", "units": 16, "return_sequences": True},
                               {"type": "output", "units": 2, "activation": "softmax", "loss": "cross_entropy"}]},
        "training": {"epochs": 25, "batch_size_per_worker": 16, "num_workers": 2,
                     "optimizer": {"type": "adam", "learning_rate": 0.02}},
    }  # fmt: skip


def test_per_step_labels_with_a_separate_label_dataset(service: Service, data: Path) -> None:
    """Features and labels in separate data joined by sequence id; labels shorter than the features, aligned at
    the end; padding never counts in the loss or the metrics."""
    _per_step_data(data)
    body = _per_step_body()
    job = _done(service, body)
    assert job["result"]["validation"]["accuracy"] > 0.85

    wrong = {**body, "network": {"layers": [{"type": "lstm", "units": 16},
                                            {"type": "output", "units": 2, "activation": "softmax",
                                             "loss": "cross_entropy"}]}}  # fmt: skip
    problem = service.client.post("/train", json=wrong)
    assert problem.status_code == 422 and "per_step labels need an output per step" in problem.json()["detail"]


def test_sequences_on_the_export_path_train_as_on_the_direct_path(service: Service, data: Path) -> None:
    """The shards carry each sequence's length and per-step label mask: a job reading them gets bitwise the weights
    and the validation figures of the direct path (without them it trained on the padding)."""
    from safetensors.torch import load_file

    _per_step_data(data)
    base = _per_step_body()
    training = {**base["training"], "epochs": 2}
    jobs = [_done(service, {**base, "name": f"per-step-{path}-{i}", "training": {**training, "data_path": path}})
            for i, path in enumerate(("direct", "export", "export"))]  # fmt: skip
    lines = service.client.get(f"/jobs/{jobs[2]['id']}/logs").json()["lines"]
    assert any("training from exported tensors" in line["message"] for line in lines)
    weights = [load_file(str(_model_dir(service, job) / "weights.safetensors")) for job in jobs]
    for other in weights[1:]:
        assert all(bool((weights[0][k] == other[k]).all()) for k in weights[0])
    assert jobs[2]["result"]["validation"] == jobs[0]["result"]["validation"]
