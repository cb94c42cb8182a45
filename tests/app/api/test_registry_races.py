"""What a registry delete leaves when something else of the version is under way at that instant, and the limit on
tags (docs/inference.md#registry-and-archives).

Over real HTTP (a service with alice's, bob's and root's keys, one xgboost model alice trained, more versions
registered as copies of its files, a small torch network saved as a version): an ONNX export that finishes after
the version was deleted keeps nothing on disk; a loaded model leaves the driver's model cache when its version is
deleted (on another driver, once a request found it gone); an evaluation queued at the instant its version is
deleted fails saying the files are gone; a model or a version has at most ``TAGS_MAX`` tags. The interleavings are
made by running the delete inside the step it races (a wrapper around the real step), never by waiting."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

from app.core.errors import NotFound
from app.db.models import Job
from app.db.session import transaction
from app.schemas.inference import ModelSelector
from app.services import inference, jobs, models, online
from app.services.model_tags import TAGS_MAX
from app.services.resolved_models import ResolvedModels
from tests.helpers import (
    ENDED,
    TAXI_FEATURES,
    Service,
    finished,
    problem,
    registry_world,
)
from workers import storage
from workers.inference.cache import ModelCache

REPO = Path(__file__).resolve().parents[3]
MODEL = "race-xgb"


@pytest.fixture(scope="module")
def world(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The service with keys; alice's model ``race-xgb`` version 1, trained."""
    with registry_world(spark, tmp_path_factory.mktemp("registry-races"), MODEL) as world:
        yield world


def _register(world: dict[str, Any], name: str, framework: str, params: dict[str, Any], source: Path) -> int:
    svc: Service = world["svc"]
    target = svc.runtime.settings.artifact_root / "copies" / uuid.uuid4().hex
    shutil.copytree(source, target)
    with transaction(svc.runtime.db) as s:
        row = models.register_version(session=s, name=name, framework=framework, artifact_uri=target.as_uri(),
                                      metrics={}, params=params, job_id=None, owner="alice")  # fmt: skip
        return row.version


def _copy(world: dict[str, Any]) -> int:
    """A new version of ``race-xgb``: version 1's files copied inside the artifact root."""
    with world["svc"].runtime.db() as s:
        first = models.get_version(session=s, name=MODEL, version=1)
        framework, params, source = first.framework, dict(first.params), storage.local_path(first.artifact_uri)
    return _register(world, MODEL, framework, params, source)


def _torch_version(world: dict[str, Any], tmp_path: Path) -> int:
    """A version of ``race-torch``: a small dense network saved as training saves one."""
    from workers.inference import standalone
    from workers.training.torch.checkpoint import save_model

    network = {"input_shape": [3], "layers": [{"type": "dense", "units": 4, "activation": "relu"},
                                              {"type": "output", "units": 1, "activation": "identity",
                                               "loss": "mse"}]}  # fmt: skip
    card = {"network": network, "features": ["a", "b", "c"], "labels": ["y"], "task": "regression"}
    save_model(tmp_path / "net", standalone.build_module(network), card)
    return _register(world, "race-torch", "torch", card, tmp_path / "net")


def _predict(client: httpx.Client, model: dict[str, Any]) -> httpx.Response:
    row = pd.read_parquet(REPO / "datasets/taxi/eval.parquet")[TAXI_FEATURES].head(1).to_dict("records")[0]
    return client.post("/predict", json={"model": model, "dataframe_records": [row]})


# --- 1. an ONNX export racing the delete ----------------------------------------------------------------------------


def test_a_version_deleted_while_its_onnx_export_runs_leaves_nothing_on_disk(
    world: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export subprocess ends after the DELETE committed and removed the version's files: the export was renamed
    into ``<artifact_root>/onnx/`` for a version that no longer exists, and served."""
    alice: httpx.Client = world["alice"]
    number = _torch_version(world, tmp_path)
    real_run = subprocess.run
    deletes: list[int] = []

    def export_then_delete(args: Any, *rest: Any, **kwargs: Any) -> Any:
        done = real_run(args, *rest, **kwargs)
        if "workers.inference.onnx_export" in args:  # the export ran; the version is deleted before it is kept
            deletes.append(alice.delete(f"/models/race-torch/versions/{number}").status_code)
        return done

    monkeypatch.setattr(subprocess, "run", export_then_delete)
    url = f"/models/race-torch/versions/{number}/artifact"
    response = alice.get(url, params={"format": "onnx"})
    while response.status_code == 503:  # the export outlasted one request's wait: ask again, as Retry-After says
        response = alice.get(url, params={"format": "onnx"})
    assert deletes == [204]
    assert "deleted" in problem(response, 404)["detail"]
    onnx = world["svc"].runtime.settings.artifact_root / "onnx"
    assert sorted(p.name for p in onnx.glob(f"race-torch-v{number}-*")) == []


# --- 2. a job queued at the instant of the delete ------------------------------------------------------------------


def test_an_evaluation_queued_as_its_version_is_deleted_fails_saying_the_files_are_gone(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The DELETE commits after the evaluation resolved its version and before its job is written: the delete saw
    no job (204), the job's run finds the files gone and says so (not a traceback of a missing file)."""
    svc: Service = world["svc"]
    alice: httpx.Client = world["alice"]
    number = _copy(world)
    real_submit = inference.jobs.submit
    deletes: list[int] = []

    def delete_then_submit(**kwargs: Any) -> Any:
        deletes.append(alice.delete(f"/models/{MODEL}/versions/{number}").status_code)
        return real_submit(**kwargs)

    monkeypatch.setattr(inference.jobs, "submit", delete_then_submit)
    body = {"model": {"name": MODEL, "version": number}, "dataset": {"uri": "datasets/taxi/eval.parquet"}}
    response = alice.post("/evaluate", json=body)
    monkeypatch.undo()
    assert deletes == [204]
    assert response.status_code == 202, response.text  # the delete saw no job; the submission no delete
    job = svc.wait(response.json()["id"], ENDED)
    assert job["status"] == "FAILED", job
    assert job["error"]["reason"] == "MODEL_FILES_MISSING", job["error"]
    assert f"{MODEL} version {number} are missing" in job["error"]["message"], job["error"]


def test_a_fine_tune_queued_as_its_init_from_version_is_deleted_fails_saying_so(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As for an evaluation: ``training.init_from`` names a version deleted between the plan and the job's row."""
    from app.services import training
    from bench.chaos import digits_job

    svc: Service = world["svc"]
    alice: httpx.Client = world["alice"]
    finished(svc, alice.post("/train", json=digits_job("race-source", epochs=1, workers=1)))
    with svc.runtime.db() as s:
        source = models.get_version(session=s, name="race-source", version=1)
        params, files = dict(source.params), storage.local_path(source.artifact_uri)
    number = _register(world, "race-source", "torch", params, files)
    real_submit = training.jobs.submit
    deletes: list[int] = []

    def delete_then_submit(**kwargs: Any) -> Any:
        deletes.append(alice.delete(f"/models/race-source/versions/{number}").status_code)
        return real_submit(**kwargs)

    monkeypatch.setattr(training.jobs, "submit", delete_then_submit)
    body = digits_job("race-tuned", epochs=1, workers=1)
    body["training"]["init_from"] = {"name": "race-source", "version": number}
    response = alice.post("/train", json=body)
    monkeypatch.undo()
    assert deletes == [204]
    assert response.status_code == 202, response.text
    job = svc.wait(response.json()["id"], ENDED)
    assert job["status"] == "FAILED", job
    assert job["error"]["reason"] == "MODEL_FILES_MISSING", job["error"]
    assert f"race-source version {number}" in job["error"]["message"], job["error"]
    assert "training.init_from" in job["error"]["message"], job["error"]


def test_a_delete_of_a_version_a_queued_job_uses_is_still_a_409(world: dict[str, Any]) -> None:
    """The other order: the job was written first; the delete names it."""
    db = world["svc"].runtime.db
    number = _copy(world)
    with transaction(db) as s:  # QUEUED, written straight into the database: nothing sends it
        job, _ = jobs.create_job(session=s, job_type="evaluate", request={}, name=MODEL, owner="alice")
        job.model_name, job.model_version, job_id = MODEL, number, str(job.id)
    try:
        refused = problem(world["alice"].delete(f"/models/{MODEL}/versions/{number}"), 409)
        assert refused["jobs"] == [job_id] and job_id in refused["detail"], refused
    finally:
        with transaction(db) as s:
            row = s.get(Job, job_id)
            assert row is not None
            row.status = "CANCELLED"


# --- 3. the driver's model cache -----------------------------------------------------------------------------------


def test_a_deleted_versions_loaded_model_leaves_this_drivers_cache_at_once(world: dict[str, Any]) -> None:
    svc: Service = world["svc"]
    alice: httpx.Client = world["alice"]
    number = _copy(world)
    assert _predict(alice, {"name": MODEL, "version": number}).status_code == 200
    uri = alice.get(f"/models/{MODEL}/versions/{number}").json()["artifact_uri"]
    assert uri in svc.runtime.model_cache
    assert alice.delete(f"/models/{MODEL}/versions/{number}").status_code == 204
    assert uri not in svc.runtime.model_cache  # it was held until the cache evicted it
    assert "was deleted" in problem(_predict(alice, {"name": MODEL, "version": number}), 404)["detail"]


def test_another_driver_unloads_a_deleted_version_once_a_request_found_it_gone(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another driver (its own resolutions and model cache, the same database): within ``ttl_s`` it still serves
    the loaded model; once its resolution is ``ttl_s`` old a request is a 404, and its next prediction drops the
    model from its cache. The clock is moved, not waited for."""
    import app.services.resolved_models as resolved

    svc: Service = world["svc"]
    number = _copy(world)
    other, cache = ResolvedModels(), ModelCache(4)
    x = np.zeros((1, len(TAXI_FEATURES)), dtype="float32")
    doomed = other.get(svc.runtime.db, ModelSelector(name=MODEL, version=number))
    online.predict_rows(model=doomed, x=x, cache=cache, spark=svc.runtime.spark)
    assert doomed.uri in cache
    assert world["alice"].delete(f"/models/{MODEL}/versions/{number}").status_code == 204
    now = resolved.time.monotonic()
    monkeypatch.setattr(resolved.time, "monotonic", lambda: now + other.ttl_s)
    with pytest.raises(NotFound, match="was deleted"):
        other.get(svc.runtime.db, ModelSelector(name=MODEL, version=number))
    first = other.get(svc.runtime.db, ModelSelector(name=MODEL, version=1))
    online.predict_rows(model=first, x=x, cache=cache, spark=svc.runtime.spark)
    assert doomed.uri not in cache and first.uri in cache


# --- 4. at most TAGS_MAX tags ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("on", ["model", "version"])
def test_at_most_tags_max_tags_and_past_it_a_422_that_writes_nothing(world: dict[str, Any], on: str) -> None:
    alice: httpx.Client = world["alice"]
    name = f"race-tags-{on}"
    with world["svc"].runtime.db() as s:
        source = storage.local_path(models.get_version(session=s, name=MODEL, version=1).artifact_uri)
    number = _register(world, name, "xgboost", {"features": TAXI_FEATURES, "label": "y"}, source)
    base = f"/models/{name}" + (f"/versions/{number}" if on == "version" else "")
    for i in range(TAGS_MAX):
        assert alice.put(f"{base}/tags/k{i}", json={"value": "v"}).status_code == 200
    refused = problem(alice.put(f"{base}/tags/one-more", json={"value": "v"}), 422)
    assert f"has {TAGS_MAX} tags, the most it may have" in refused["detail"], refused
    assert refused["errors"][0]["loc"] == "key" and refused["errors"][0]["in"] == "path", refused
    assert alice.put(f"{base}/tags/k0", json={"value": "new"}).status_code == 200  # a replaced value is no new tag
    tags = alice.get(base).json()["tags"]
    assert len(tags) == TAGS_MAX and "one-more" not in tags and tags["k0"] == "new", tags
