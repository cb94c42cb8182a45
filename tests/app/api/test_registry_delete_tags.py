"""The registry as an MLflow user expects it (docs/inference.md#registry-and-archives): deleting a version or a
model, tags on both, and reading one alias.

Over real HTTP (a service with alice's, bob's and root's keys, one xgboost model alice trained, more versions of
it registered as copies of its files): a deleted version answers 404 at once on the driver that deleted it, its
alias and files go with it, its number is not given again, an unfinished job that uses it is a 409, another owner
gets the 404 of an unknown model. On both databases: the rules behind those answers, another driver's cache that
stops serving a deleted version once its resolution is older than ``ttl_s``, and migration 0014."""

from __future__ import annotations

import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.core.errors import Conflict, NotFound
from app.db.models import Job
from app.db.session import transaction
from app.schemas.inference import ModelSelector
from app.services import jobs, model_tags, models, registry_edits
from app.services.resolved_models import ResolvedModels
from tests.helpers import (
    TAXI_FEATURES,
    Service,
    problem,
    registry_world,
)
from workers import storage

REPO = Path(__file__).resolve().parents[3]
MODEL = "reg-xgb"


@pytest.fixture(scope="module")
def world(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The service with keys; alice's model ``reg-xgb`` version 1, trained."""
    with registry_world(spark, tmp_path_factory.mktemp("registry"), MODEL) as world:
        yield world


def _copy(world: dict[str, Any], *, uri: str | None = None, name: str = MODEL) -> int:
    """A new version of alice's model (``name``): version 1's files copied inside the artifact root (or ``uri``)."""
    svc: Service = world["svc"]
    with svc.runtime.db() as s:
        first = models.get_version(session=s, name=MODEL, version=1)
        framework, params, source = first.framework, dict(first.params), storage.local_path(first.artifact_uri)
    if uri is None:
        target = svc.runtime.settings.artifact_root / "copies" / uuid.uuid4().hex
        shutil.copytree(source, target)
        uri = target.as_uri()
    with transaction(svc.runtime.db) as s:
        row = models.register_version(session=s, name=name, framework=framework, artifact_uri=uri, metrics={},
                                      params=params, job_id=None, owner="alice")  # fmt: skip
        return row.version


def _files(world: dict[str, Any], version: int) -> Path:
    return storage.local_path(world["alice"].get(f"/models/{MODEL}/versions/{version}").json()["artifact_uri"])


def _predict(client: httpx.Client, model: dict[str, Any]) -> httpx.Response:
    row = pd.read_parquet(REPO / "datasets/taxi/eval.parquet")[TAXI_FEATURES].head(1).to_dict("records")[0]
    return client.post("/predict", json={"model": model, "dataframe_records": [row]})


def _job(world: dict[str, Any], job_type: str, **values: Any) -> str:
    """A QUEUED job of alice's written straight into the database (nothing sends it: it stays QUEUED)."""
    with transaction(world["svc"].runtime.db) as s:
        request = values.pop("request", {})
        job, _ = jobs.create_job(session=s, job_type=job_type, request=request, name=values.pop("name", MODEL),
                                 owner="alice")  # fmt: skip
        for column, value in values.items():
            setattr(job, column, value)
        return str(job.id)


def _end(world: dict[str, Any], job_id: str) -> None:
    with transaction(world["svc"].runtime.db) as s:
        row = s.get(Job, job_id)
        assert row is not None
        row.status = "CANCELLED"


# --- delete ------------------------------------------------------------------------------------------------------


def test_a_deleted_version_is_a_404_at_once_with_its_alias_and_files_gone(world: dict[str, Any]) -> None:
    alice: httpx.Client = world["alice"]
    number = _copy(world)
    assert alice.put(f"/models/{MODEL}/aliases/doomed", json={"version": number}).status_code == 200
    assert alice.put(f"/models/{MODEL}/versions/{number}/tags/stage", json={"value": "x"}).status_code == 200
    selectors = ({"name": MODEL, "version": number}, {"name": MODEL, "alias": "doomed"})
    for selector in selectors:  # resolved, loaded and cached by this driver
        assert _predict(alice, selector).status_code == 200
    files = _files(world, number)
    assert (files / "model.json").is_file() or any(files.iterdir())

    assert alice.delete(f"/models/{MODEL}/versions/{number}").status_code == 204
    for selector in selectors:  # an explicit version was cached for ever: it answered 200 after the delete
        problem(_predict(alice, selector), 404)
    gone = problem(alice.get(f"/models/{MODEL}/versions/{number}"), 404)
    assert "was deleted" in gone["detail"], gone
    assert not files.exists()
    body = alice.get(f"/models/{MODEL}").json()
    assert "doomed" not in body["aliases"] and number not in [v["version"] for v in body["versions"]], body
    problem(alice.get(f"/models/{MODEL}/aliases/doomed"), 404)
    problem(alice.delete(f"/models/{MODEL}/versions/{number}"), 404)  # a second delete
    assert _predict(alice, {"name": MODEL, "version": 1}).status_code == 200  # the others serve on


def test_another_driver_that_has_not_loaded_a_deleted_version_answers_404(world: dict[str, Any]) -> None:
    """A driver whose resolution is still fresh (under ``ttl_s``) but that never loaded the model finds its files
    gone: the 404 of a deleted version, not a 500 from the loader."""
    import numpy as np

    from app.services import online
    from workers.inference.cache import ModelCache

    svc: Service = world["svc"]
    number = _copy(world)
    other = ResolvedModels(ttl_s=3600)  # the other driver's caches: a fresh resolution, nothing loaded
    selector = ModelSelector(name=MODEL, version=number)
    ref = other.get(svc.runtime.db, selector)
    assert world["alice"].delete(f"/models/{MODEL}/versions/{number}").status_code == 204
    assert other.get(svc.runtime.db, selector) is ref
    x = np.zeros((1, len(TAXI_FEATURES)), dtype="float32")
    with pytest.raises(NotFound, match=f"version {number} are gone"):
        online.predict_rows(model=ref, x=x, cache=ModelCache(2), spark=svc.runtime.spark)


def test_version_numbers_are_never_given_again(world: dict[str, Any]) -> None:
    alice: httpx.Client = world["alice"]
    newest = _copy(world)
    assert alice.delete(f"/models/{MODEL}/versions/{newest}").status_code == 204
    assert alice.get(f"/models/{MODEL}").json()["latest_version"] < newest
    assert _copy(world) == newest + 1


def test_files_outside_the_artifact_store_stay_and_a_failed_removal_leaves_no_half_entry(
    world: dict[str, Any], tmp_path: Path
) -> None:
    alice: httpx.Client = world["alice"]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    number = _copy(world, uri=outside.as_uri())
    assert alice.delete(f"/models/{MODEL}/versions/{number}").status_code == 204
    assert outside.is_dir()  # not the store's to remove
    # files the store cannot remove (a file where a directory should be): the entry is gone all the same
    odd = world["svc"].runtime.settings.artifact_root / "odd" / uuid.uuid4().hex
    odd.parent.mkdir(exist_ok=True)
    odd.write_text("not a directory")
    number = _copy(world, uri=odd.as_uri())
    assert alice.delete(f"/models/{MODEL}/versions/{number}").status_code == 204
    problem(alice.get(f"/models/{MODEL}/versions/{number}"), 404)
    assert number not in [v["version"] for v in alice.get(f"/models/{MODEL}").json()["versions"]]


def test_an_unfinished_job_that_uses_the_version_is_a_409_naming_it(world: dict[str, Any]) -> None:
    alice: httpx.Client = world["alice"]
    number = _copy(world)
    init = {"training": {"init_from": {"name": MODEL, "version": number}}}
    users = [
        _job(world, "evaluate", model_name=MODEL, model_version=number),
        _job(world, "predict", model_name=MODEL, model_version=number),
        _job(world, "train", name="fine-tuned", request=init),
        _job(world, "tune", name="fine-tuned-search", request={"base": init}),
    ]
    for job_id in users:
        refused = problem(alice.delete(f"/models/{MODEL}/versions/{number}"), 409)
        assert job_id in refused["jobs"] and job_id in refused["detail"], refused
        assert "QUEUED" in refused["detail"] and "Cancel the job" in refused["detail"], refused
        _end(world, job_id)
    assert alice.get(f"/models/{MODEL}/versions/{number}").status_code == 200  # nothing went
    assert alice.delete(f"/models/{MODEL}/versions/{number}").status_code == 204


def test_a_running_tune_keeps_its_trials_versions(world: dict[str, Any]) -> None:
    alice: httpx.Client = world["alice"]
    number = _copy(world)
    tune = _job(world, "tune")
    _job(world, "train", parent_id=tune, trial=0, status="SUCCEEDED", model_name=MODEL, model_version=number)
    refused = problem(alice.delete(f"/models/{MODEL}/versions/{number}"), 409)
    assert refused["jobs"] == [tune] and "'best'" in refused["detail"], refused
    _end(world, tune)
    assert alice.delete(f"/models/{MODEL}/versions/{number}").status_code == 204


def test_a_whole_model_goes_with_its_versions_aliases_tags_and_files(world: dict[str, Any]) -> None:
    alice: httpx.Client = world["alice"]
    name = f"whole-{uuid.uuid4().hex[:6]}"
    numbers = [_copy(world, name=name) for _ in range(2)]
    files = [storage.local_path(alice.get(f"/models/{name}/versions/{n}").json()["artifact_uri"]) for n in numbers]
    assert alice.put(f"/models/{name}/aliases/champion", json={"version": 2}).status_code == 200
    assert alice.put(f"/models/{name}/tags/team", json={"value": "fraud"}).status_code == 200
    assert alice.put(f"/models/{name}/versions/1/tags/note", json={"value": "first"}).status_code == 200
    assert _predict(alice, {"name": name, "version": 1}).status_code == 200
    training = _job(world, "train", name=name)  # queued into the model: it would make the model again
    refused = problem(alice.delete(f"/models/{name}"), 409)
    assert refused["jobs"] == [training] and "register a version" in refused["detail"], refused
    _end(world, training)

    assert alice.delete(f"/models/{name}").status_code == 204
    problem(alice.get(f"/models/{name}"), 404)
    problem(_predict(alice, {"name": name, "version": 1}), 404)
    assert not any(f.exists() for f in files)
    assert name not in [m["name"] for m in alice.get("/models").json()["items"]]
    problem(alice.delete(f"/models/{name}"), 404)
    assert _copy(world, name=name) == 1  # the name is free; a new model under it starts again (as MLflow)
    fresh = alice.get(f"/models/{name}").json()
    assert fresh["tags"] == {} and fresh["aliases"] == {} and fresh["versions"][0]["tags"] == {}, fresh


def test_another_owner_gets_the_404_of_an_unknown_model(world: dict[str, Any]) -> None:
    alice, bob, root = world["alice"], world["bob"], world["root"]
    number = _copy(world)
    assert alice.put(f"/models/{MODEL}/aliases/kept", json={"version": number}).status_code == 200
    for method, path, body in (
        ("DELETE", "/models/{}", None),
        ("DELETE", f"/models/{{}}/versions/{number}", None),
        ("PUT", "/models/{}/tags/team", {"value": "bob"}),
        ("PUT", f"/models/{{}}/versions/{number}/tags/team", {"value": "bob"}),
        ("DELETE", "/models/{}/tags/team", None),
        ("GET", "/models/{}/aliases/kept", None),
    ):
        mine = problem(bob.request(method, path.format(MODEL), json=body), 404)
        unknown = problem(bob.request(method, path.format("no-such-model"), json=body), 404)
        assert mine["detail"].replace(MODEL, "?") == unknown["detail"].replace("no-such-model", "?"), (mine, unknown)
    assert alice.get(f"/models/{MODEL}/aliases/kept").json()["version"] == number  # bob changed nothing
    assert alice.get(f"/models/{MODEL}").json()["tags"].get("team") != "bob"
    assert root.delete(f"/models/{MODEL}/versions/{number}").status_code == 204  # an admin may


# --- tags and one alias -------------------------------------------------------------------------------------------


def test_tags_round_trip_on_a_model_and_a_version(world: dict[str, Any]) -> None:
    alice: httpx.Client = world["alice"]
    put = alice.put(f"/models/{MODEL}/tags/team", json={"value": "fraud"})
    assert put.status_code == 200 and put.json() == {"name": MODEL, "key": "team", "value": "fraud"}, put.text
    assert alice.put(f"/models/{MODEL}/tags/team", json={"value": "risk"}).status_code == 200  # replaced
    assert alice.put(f"/models/{MODEL}/tags/owner%20note", json={"value": ""}).status_code == 200
    put = alice.put(f"/models/{MODEL}/versions/1/tags/validated.by", json={"value": "a\tb\nc"})
    assert put.json() == {"name": MODEL, "version": 1, "key": "validated.by", "value": "a\tb\nc"}, put.text

    one = alice.get(f"/models/{MODEL}").json()
    assert one["tags"] == {"owner note": "", "team": "risk"}, one
    assert one["versions"][0]["tags"] == {"validated.by": "a\tb\nc"}, one
    assert alice.get(f"/models/{MODEL}/versions/1").json()["tags"] == {"validated.by": "a\tb\nc"}
    listed = {m["name"]: m for m in alice.get("/models").json()["items"]}
    assert listed[MODEL]["tags"] == one["tags"] and listed[MODEL]["versions"][0]["tags"] == one["versions"][0]["tags"]

    assert [m["name"] for m in alice.get("/models", params={"tag": "team:risk"}).json()["items"]] == [MODEL]
    assert [m["name"] for m in alice.get("/models", params={"tag": ["team", "owner note:"]}).json()["items"]] == [MODEL]
    assert alice.get("/models", params={"tag": "team:fraud"}).json()["items"] == []
    assert alice.get("/models", params={"tag": ["team:risk", "absent"]}).json()["items"] == []

    assert alice.delete(f"/models/{MODEL}/tags/team").status_code == 204
    assert alice.delete(f"/models/{MODEL}/versions/1/tags/validated.by").status_code == 204
    assert "team" not in alice.get(f"/models/{MODEL}").json()["tags"]
    assert alice.get(f"/models/{MODEL}/versions/1").json()["tags"] == {}
    assert "no tag 'team'" in problem(alice.delete(f"/models/{MODEL}/tags/team"), 404)["detail"]
    problem(alice.delete(f"/models/{MODEL}/versions/1/tags/validated.by"), 404)
    problem(alice.put(f"/models/{MODEL}/versions/999/tags/a", json={"value": "x"}), 404)
    problem(alice.put("/models/no-such-model/tags/a", json={"value": "x"}), 404)


@pytest.mark.parametrize(
    ("key", "body", "loc", "said"),
    [
        (" lead", {"value": "x"}, "key", "not a tag key"),
        ("trail ", {"value": "x"}, "key", "not a tag key"),
        ("k" * 251, {"value": "x"}, "key", "1 to 250"),
        ("caf\u00e9", {"value": "x"}, "key", "letters, digits"),
        ("team", {"value": "x" * 5001}, "value", "at most 5000"),
        ("team", {"value": "a\u0000b"}, "value", "control character"),
        ("team", {"value": 3}, "value", "string"),
        ("team", {"value": "x", "color": "red"}, "color", ""),
        ("team", {}, "value", ""),
    ],
)
def test_a_bad_tag_is_a_422_naming_the_field_and_nothing_is_written(
    world: dict[str, Any], key: str, body: dict[str, Any], loc: str, said: str
) -> None:
    alice: httpx.Client = world["alice"]
    for path in (f"/models/{MODEL}/tags/{key}", f"/models/{MODEL}/versions/1/tags/{key}"):
        refused = problem(alice.put(path, json=body), 422)
        assert refused["errors"][0]["loc"] == loc, refused
        assert said.lower() in refused["detail"].lower(), refused
    one = alice.get(f"/models/{MODEL}").json()
    assert key not in one["tags"] and key not in one["versions"][0]["tags"], one


def test_a_bad_tag_filter_is_a_422_in_the_query(world: dict[str, Any]) -> None:
    refused = problem(world["alice"].get("/models", params={"tag": "no/slash:x"}), 422)
    assert refused["errors"][0]["loc"] == "tag" and refused["errors"][0]["in"] == "query", refused


def test_a_tag_key_of_dots_alone_is_a_422(world: dict[str, Any]) -> None:
    """``.`` and ``..`` are removed from a URL by HTTP clients (``DELETE .../tags/..`` reaches ``DELETE /models/m``):
    no such tag can be made. Sent encoded, they reach the service, which refuses them."""
    alice: httpx.Client = world["alice"]
    for key in ("%2E%2E", "%2E", "%2E%2E%2E"):
        for path in (f"/models/{MODEL}/tags/{key}", f"/models/{MODEL}/versions/1/tags/{key}"):
            refused = problem(alice.put(path, json={"value": "x"}), 422)
            assert refused["errors"][0]["loc"] == "key" and "only dots" in refused["detail"], refused
    refused = problem(alice.get("/models", params={"tag": "..:x"}), 422)
    assert refused["errors"][0]["loc"] == "tag", refused
    one = alice.get(f"/models/{MODEL}").json()
    assert not {".", "..", "..."} & (set(one["tags"]) | set(one["versions"][0]["tags"])), one


def test_at_most_10_tag_filters(world: dict[str, Any]) -> None:
    """Each filter is a subquery: 100 of them held a PostgreSQL backend for 21 s."""
    alice: httpx.Client = world["alice"]
    assert alice.get("/models", params={"tag": [f"k{i}" for i in range(10)]}).status_code == 200
    refused = problem(alice.get("/models", params={"tag": [f"k{i}" for i in range(11)]}), 422)
    assert refused["errors"][0]["loc"] == "tag" and refused["errors"][0]["in"] == "query", refused
    assert "at most 10" in refused["detail"], refused


def test_one_alias_reads_as_the_version_it_names(world: dict[str, Any]) -> None:
    alice: httpx.Client = world["alice"]
    assert alice.put(f"/models/{MODEL}/aliases/champion", json={"version": 1}).status_code == 200
    got = alice.get(f"/models/{MODEL}/aliases/champion")
    assert got.status_code == 200, got.text
    version = alice.get(f"/models/{MODEL}/versions/1").json()
    assert got.json() == version and "champion" in version["aliases"], got.json()
    assert version["job_id"] == world["job"]["id"]
    missing = problem(alice.get(f"/models/{MODEL}/aliases/nope"), 404)
    assert "no alias 'nope'" in missing["detail"] and "champion" in missing["detail"], missing
    assert "No model named" in problem(alice.get("/models/no-such-model/aliases/champion"), 404)["detail"]
    assert alice.head(f"/models/{MODEL}/aliases/champion").status_code == 200


# --- the rules on both databases ----------------------------------------------------------------------------------


def _register(db: Any, name: str = "m", owner: str = "alice", uri: str = "file:///nowhere") -> int:
    with transaction(db) as s:
        row = models.register_version(session=s, name=name, framework="spark_ml", artifact_uri=uri, metrics={},
                                      params={"features": ["x"], "label": "y"}, job_id=None, owner=owner)  # fmt: skip
        return row.version


def test_another_drivers_cache_stops_serving_a_deleted_version_after_its_ttl(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two drivers on one database: the one that deletes forgets at once (the route calls ``forget``); the other
    re-resolves what it cached once the resolution is ``ttl_s`` old, and gets the 404. The clock is moved, not
    waited for."""
    import app.services.resolved_models as resolved

    _register(db)
    number = _register(db)
    here, there = ResolvedModels(), ResolvedModels()
    selector = ModelSelector(name="m", version=number)
    assert here.get(db, selector).version == there.get(db, selector).version == number
    with transaction(db) as s:
        registry_edits.delete_version(session=s, name="m", version=number, owner="alice")
    here.forget("m", versions=True)  # as the DELETE route does
    with pytest.raises(NotFound, match="was deleted"):
        here.get(db, selector)
    assert there.get(db, selector).version == number  # within ttl_s: the bound docs/inference.md states
    now = resolved.time.monotonic()
    monkeypatch.setattr(resolved.time, "monotonic", lambda: now + there.ttl_s)
    assert there.peek(("m", number, None, None)) is None
    with pytest.raises(NotFound, match="was deleted"):
        there.get(db, selector)
    assert there.get(db, ModelSelector(name="m", version=1)).version == 1


def test_delete_rules_on_both_databases(db: Any) -> None:
    for _ in range(3):
        _register(db)
    with transaction(db) as s:
        models.set_alias(session=s, name="m", alias="champion", version=3)
    with transaction(db) as s:
        job, _ = jobs.create_job(session=s, job_type="evaluate", request={}, name="m", owner="alice")
        job.status, job.model_name, job.model_version = "RUNNING", "m", 2
        running = job.id
    with db() as s, pytest.raises(NotFound):  # another owner's model is an unknown one
        registry_edits.delete_version(session=s, name="m", version=3, owner="bob")
    with db() as s, pytest.raises(Conflict, match=running):
        registry_edits.delete_version(session=s, name="m", version=2, owner="alice")
    with db() as s, pytest.raises(Conflict, match=running):
        registry_edits.delete_model(session=s, name="m", owner=None)
    with transaction(db) as s:
        removal = registry_edits.delete_version(session=s, name="m", version=3, owner="alice")
    assert [number for _, number, _ in removal.versions] == [3]
    with db() as s:
        assert models.aliases_of(session=s, model_id=models.get_model(session=s, name="m").id) == []
        with pytest.raises(NotFound, match="no alias 'champion'"):
            models.resolve_version(session=s, name="m", alias="champion")
    assert _register(db) == 4  # never 3 again
    with transaction(db) as s:
        row = s.get(Job, running)
        assert row is not None
        row.status = "SUCCEEDED"
    with transaction(db) as s:
        removal = registry_edits.delete_model(session=s, name="m", owner="alice")
    assert sorted(number for _, number, _ in removal.versions) == [1, 2, 4]
    with db() as s, pytest.raises(NotFound, match="No model named 'm'"):
        models.get_model(session=s, name="m")
    assert _register(db) == 1


def test_revision_0014_fills_last_version_from_the_versions_there_are(db_url: str) -> None:
    from alembic import command

    from app.db.migrate import alembic_config
    from app.db.session import create_db_engine

    engine = create_db_engine(db_url)
    now = datetime.now(UTC)
    with engine.begin() as conn:
        cfg = alembic_config(engine)
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0013")
        for model_id, name in ((1, "a"), (2, "b")):
            conn.execute(text("INSERT INTO models (id, name, owner, created_at) VALUES (:id, :name, 'alice', :at)"),
                         {"id": model_id, "name": name, "at": now})  # fmt: skip
        for version in (1, 2, 5):
            conn.execute(
                text("INSERT INTO model_versions (model_id, version, framework, status, artifact_uri, metrics, params, "
                     "created_at) VALUES (1, :v, 'torch', 'READY', 'file:///x', '{}', '{}', :at)"),
                {"v": version, "at": now},
            )  # fmt: skip
        command.upgrade(cfg, "0014")
        assert dict(conn.execute(text("SELECT name, last_version FROM models")).all()) == {"a": 5, "b": 0}
    engine.dispose()


# --- writes racing a delete (PostgreSQL: two drivers) -------------------------------------------------------------


def _racing(db: Any, delete: Callable[[Session], Any], write: Callable[[Session], Any]) -> BaseException | None:
    """``delete`` in one session, left uncommitted; ``write`` in another (a thread: another driver), which waits on
    its lock; then the delete commits. What ``write`` raised (None: it committed)."""
    raised: list[BaseException | None] = []

    def other() -> None:
        with db() as s:
            try:
                write(s)
                s.commit()
                raised.append(None)
            except Exception as exc:  # what the route would answer from
                raised.append(exc)

    with db() as first:
        delete(first)
        thread = threading.Thread(target=other)
        thread.start()
        name = first.get_bind().url.database
        for _ in range(600):  # until the write waits on the lock (or ended: it did not wait)
            waiting = first.get_bind().connect()
            with waiting:
                locked = waiting.scalar(text("SELECT count(*) FROM pg_stat_activity WHERE datname = :db AND "
                                             "wait_event_type = 'Lock'"), {"db": name})  # fmt: skip
            if locked or not thread.is_alive():
                break
            thread.join(0.1)
        first.commit()
    thread.join()
    return raised[0]


@pytest.mark.parametrize("write", ["model tag", "version tag", "alias", "second delete"])
def test_a_write_racing_a_delete_is_a_404(pg_url: str, write: str) -> None:
    """A tag or alias PUT waiting on a delete of its model or version was a 500 (a foreign key); a second DELETE of
    one version answered 204 too."""
    from app.db.migrate import upgrade_database
    from app.db.session import create_db_engine, create_sessionmaker

    engine = create_db_engine(pg_url)
    upgrade_database(engine)
    db = create_sessionmaker(engine)
    _register(db)
    _register(db)
    writes: dict[str, Callable[[Session], Any]] = {
        "model tag": lambda s: model_tags.set_model_tag(session=s, name="m", key="k", value="v", owner="alice"),
        "version tag": lambda s: model_tags.set_version_tag(
            session=s, name="m", version=2, key="k", value="v", owner="alice"
        ),
        "alias": lambda s: models.set_alias(session=s, name="m", alias="champion", version=2, owner="alice"),
        "second delete": lambda s: registry_edits.delete_version(session=s, name="m", version=2, owner="alice"),
    }
    deletes: dict[bool, Callable[[Session], Any]] = {
        True: lambda s: registry_edits.delete_model(session=s, name="m", owner="alice"),
        False: lambda s: registry_edits.delete_version(session=s, name="m", version=2, owner="alice"),
    }
    try:
        raised = _racing(db, deletes[write == "model tag"], writes[write])
        assert isinstance(raised, NotFound), repr(raised)
        with db() as s:
            assert s.scalar(text("SELECT count(*) FROM model_tags")) == 0
            assert s.scalar(text("SELECT count(*) FROM model_version_tags")) == 0
            assert s.scalar(text("SELECT count(*) FROM model_aliases")) == 0
    finally:
        engine.dispose()
