"""Fine-tuning through the real service (``training.init_from``): a torch network starts from a registered model
version's weights, all of them (``strict``) or the layers that match (``strict: false``, a new output layer), and a
request that cannot start from the model is a 422 naming why, with no job made."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import torch
from safetensors.torch import load_file

from bench.chaos import digits_job
from tests.helpers import Service

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def source(service: Service) -> dict[str, Any]:
    """The model to start from: the digits MLP, three epochs on one worker."""
    return _done(service, digits_job("tune-source", epochs=3, workers=1))


def _done(service: Service, body: dict[str, Any]) -> dict[str, Any]:
    job = service.wait(service.train(body)["id"], {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=600)
    assert job["status"] == "SUCCEEDED", job["error"]
    return job


def _weights(service: Service, name: str, version: int) -> dict[str, torch.Tensor]:
    artifact = service.client.get(f"/models/{name}/versions/{version}").json()["artifact_uri"]
    return load_file(str(Path(urlparse(artifact).path) / "weights.safetensors"))


def _still(name: str, layers: list[dict[str, Any]] | None = None, **init: Any) -> dict[str, Any]:
    """One epoch at a learning rate that moves no weight measurably: what it registers is what it started from."""
    body = digits_job(name, epochs=1, workers=1)
    body["training"]["optimizer"] = {"type": "sgd", "learning_rate": 1e-12}
    body["training"]["init_from"] = {"name": "tune-source", **init}
    if layers is not None:
        body["network"]["layers"] = layers
    return body


def test_a_network_starts_from_a_model_versions_weights(service: Service, source: dict[str, Any]) -> None:
    job = _done(service, _still("tune-whole", version=1))
    assert job["result"]["initialized_from"] == {"name": "tune-source", "version": 1, "tensors": 4, "fresh": []}
    before, after = _weights(service, "tune-source", 1), _weights(service, "tune-whole", 1)
    assert before.keys() == after.keys()
    for name in before:
        torch.testing.assert_close(after[name], before[name], rtol=0, atol=1e-6)
    accuracy = job["result"]["validation"]["accuracy"]
    assert accuracy == pytest.approx(source["result"]["validation"]["accuracy"], abs=0.003)  # one row of 360
    assert accuracy > 0.8  # a fresh network at this learning rate stays near 0.1
    lines = [line["message"] for line in service.client.get(f"/jobs/{job['id']}/logs").json()["lines"]]
    assert "starting from the weights of tune-source version 1 (4 tensors)" in lines, lines


def test_a_new_output_layer_starts_fresh_and_the_rest_from_the_model(service: Service, source: dict[str, Any]) -> None:
    deeper = [
        {"type": "dense", "units": 32, "activation": "relu"},
        {"type": "dense", "units": 16, "activation": "relu"},
        {"type": "output", "units": 10, "activation": "softmax", "loss": "cross_entropy"},
    ]
    refused = service.client.post("/train", json=_still("tune-deeper", deeper))
    assert refused.status_code == 422, refused.text
    detail = refused.json()["detail"]
    assert detail.startswith("training.init_from: tune-source version 1: the model has shape [10, 32] for "
                             "layers.1.linear.weight (the network needs [16, 32])"), detail  # fmt: skip
    assert "strict to false" in detail
    job = _done(service, _still("tune-deeper", deeper, strict=False))
    # the version is pinned when the job is submitted: a retry or a later plan starts from the same weights
    assert job["request"]["training"]["init_from"] == {"name": "tune-source", "strict": False, "version": 1}
    fresh = ["layers.1.linear.weight", "layers.1.linear.bias", "layers.2.linear.weight", "layers.2.linear.bias"]
    assert job["result"]["initialized_from"] == {"name": "tune-source", "version": 1, "tensors": 2, "fresh": fresh}
    before, after = _weights(service, "tune-source", 1), _weights(service, "tune-deeper", 1)
    torch.testing.assert_close(after["layers.0.linear.weight"], before["layers.0.linear.weight"], rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("init", "words"),
    [
        ({"name": "no-such-model"}, "no-such-model"),
        ({"version": 9}, "version 9"),
        ({"alias": "champion"}, "no alias 'champion'"),
        ({"version": 1, "alias": "x"}, "give a version or an alias, not both"),
    ],
)
def test_a_model_it_cannot_start_from_is_a_422(
    service: Service, source: dict[str, Any], init: dict[str, Any], words: str
) -> None:
    before = len(service.client.get("/jobs", params={"limit": 500}).json()["items"])
    body = _still("tune-refused")
    body["training"]["init_from"] = {"name": "tune-source", **init}
    refused = service.client.post("/train", json=body)
    assert refused.status_code == 422, refused.text
    assert words in refused.json()["detail"] and "init_from" in refused.json()["detail"], refused.json()
    assert len(service.client.get("/jobs", params={"limit": 500}).json()["items"]) == before


def test_resuming_a_checkpoint_says_that_init_from_is_not_used(service: Service, source: dict[str, Any]) -> None:
    """Both given: the checkpoint's weights win, as before, but the request is told (it was dropped without a word)."""
    checkpoints = service.client.get(f"/jobs/{source['id']}/checkpoints").json()["checkpoints"]
    body = _still("tune-resumed")
    body["training"] = {**body["training"], "epochs": 4, "resume_from": checkpoints[-1]["id"]}
    job = _done(service, body)
    assert "training.init_from is not used: the checkpoint of resume_from holds the weights" in job["warnings"], job
    assert "initialized_from" not in job["result"], job["result"]
