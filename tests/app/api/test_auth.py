"""API keys and owners over real HTTP, on SQLite and PostgreSQL.

Keys: alice and bob (plain keys) and root (an admin). alice owns a registered dataset, a trained model (with an
alias), its training job and a checkpoint. The rules (docs/security.md):
- no key, a malformed header or an unknown key: 401 problem+json with ``WWW-Authenticate: Bearer``, on every
  endpoint but the health checks and the documentation;
- another owner's job, checkpoint, model or dataset answers exactly as one that does not exist: 404 where the URL
  names it, the same 404/422 as an unknown reference where the body names it; lists hold the caller's own only;
- training into a model name another owner registered: 409;
- an admin key sees and changes everything.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import LINEAR_ROWS as ROWS
from tests.helpers import Service, pg_database, running_service
from tests.helpers import linear_train_body as _train_body
from tests.helpers import problem as _problem

ALICE_KEY = "alice-0123456789abcdef"
BOB_KEY = "bob-0123456789abcdef00"
ROOT_KEY = "root-0123456789abcdef0"
KEYS = f"{ALICE_KEY}:alice, {BOB_KEY}:bob, {ROOT_KEY}:root:admin"
MODEL = "alice-model"
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
PUBLIC = {"/healthz", "/readyz", "/v2/health/live", "/v2/health/ready", "/docs", "/redoc", "/openapi.json"}


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(
    request: pytest.FixtureRequest, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The service with keys, and alice's dataset, model (alias champion), training job and a checkpoint."""
    base = tmp_path_factory.mktemp("auth")
    data = base / "data"
    data.mkdir()
    (data / "rows.csv").write_text(ROWS)
    with (
        _database(request, base) as db_url,
        running_service(spark, base, database_url=db_url, data_roots=[data], api_keys=KEYS) as svc,
    ):
        alice = httpx.Client(base_url=svc.url, headers=_auth(ALICE_KEY), timeout=60)
        bob = httpx.Client(base_url=svc.url, headers=_auth(BOB_KEY), timeout=60)
        root = httpx.Client(base_url=svc.url, headers=_auth(ROOT_KEY), timeout=60)
        svc.client.headers.update(_auth(ROOT_KEY))  # Service.wait polls with it
        dataset = alice.post("/datasets", json={"uri": "rows.csv", "name": "alice-rows"})
        assert dataset.status_code == 201, dataset.text
        job = alice.post("/train", json=_train_body(MODEL, uri=dataset.json()["id"]))
        assert job.status_code == 202, job.text
        finished = svc.wait(job.json()["id"], TERMINAL)
        assert finished["status"] == "SUCCEEDED", finished["error"]
        assert alice.put(f"/models/{MODEL}/aliases/champion", json={"version": 1}).status_code == 200
        checkpoint = _checkpoint(svc, finished["id"], base)
        try:
            yield {
                "service": svc,
                "alice": alice,
                "bob": bob,
                "root": root,
                "job_id": finished["id"],
                "dataset_id": dataset.json()["id"],
                "checkpoint_id": checkpoint,
            }
        finally:
            for client in (alice, bob, root):
                client.close()


def _database(request: pytest.FixtureRequest, base: Path) -> Any:
    from contextlib import nullcontext

    if request.param == "sqlite":
        return nullcontext(f"sqlite:///{base / 'auth.db'}")
    return pg_database(request.getfixturevalue("pg_server"))


def _checkpoint(svc: Service, job_id: str, base: Path) -> str:
    """A checkpoint row of alice's job (spark_ml jobs write none; the rules concern the row, not its files)."""
    from app.db.session import transaction
    from app.services import checkpoints

    with transaction(svc.runtime.db) as session:
        row = checkpoints.record(
            session=session, job_id=job_id, attempt=1, epoch=1, step=10, uri=str(base / "ckpt"), metrics={}
        )
        return row.id


# --- authentication ----------------------------------------------------------------------------------------------


def _operations(svc: Service) -> list[tuple[str, str]]:
    spec = httpx.get(f"{svc.url}/openapi.json").json()  # public: no key
    out = []
    for template, item in spec["paths"].items():
        for method in item:
            if method in ("get", "post", "put", "delete", "patch"):
                out.append((method.upper(), re.sub(r"\{[^}]+\}", "1", template)))
    return out


def test_every_endpoint_but_health_and_docs_needs_a_key(world: dict[str, Any]) -> None:
    svc: Service = world["service"]
    operations = _operations(svc)
    assert len(operations) > 30
    for method, path in operations:
        response = httpx.request(method, f"{svc.url}{path}", json={})
        if path in PUBLIC:
            assert response.status_code != 401, (method, path)
            continue
        problem = _problem(response, 401)
        assert response.headers["www-authenticate"].startswith("Bearer"), (method, path)
        assert problem["type"].endswith("/unauthorized") and "Authorization: Bearer" in problem["detail"]
        if path.startswith("/v2/"):
            assert problem["error"] == problem["detail"]  # the V2 protocol's error member
    for path in ("/healthz", "/readyz", "/v2/health/live", "/v2/health/ready", "/docs", "/openapi.json"):
        assert httpx.get(f"{svc.url}{path}").status_code == 200, path
    # routes no one documented are protected as well: the check comes before routing
    assert httpx.get(f"{svc.url}/nowhere").status_code == 401


@pytest.mark.parametrize(
    ("header", "error"),
    [
        (None, None),
        ("", None),
        (f"Basic {ALICE_KEY}", "invalid_request"),
        ("Bearer", "invalid_request"),
        (f"Bearer {ALICE_KEY} {BOB_KEY}", "invalid_request"),
        (ALICE_KEY, "invalid_request"),
        ("Bearer not-a-key-of-this-service", "invalid_token"),
        (f"Bearer {ALICE_KEY[:-1]}", "invalid_token"),
        (f"Bearer {ALICE_KEY}x", "invalid_token"),
    ],
)
def test_missing_malformed_and_unknown_keys_are_a_401(
    world: dict[str, Any], header: str | None, error: str | None
) -> None:
    svc: Service = world["service"]
    headers = {} if header is None else {"Authorization": header}
    response = httpx.get(f"{svc.url}/jobs", headers=headers)
    problem = _problem(response, 401)
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer realm=")
    assert (f'error="{error}"' in challenge) if error else ("error=" not in challenge)
    assert problem["request_id"] == response.headers["x-request-id"]


def test_the_scheme_is_case_insensitive(world: dict[str, Any]) -> None:
    svc: Service = world["service"]
    assert httpx.get(f"{svc.url}/jobs", headers={"Authorization": f"bearer  {ALICE_KEY}"}).status_code == 200


def test_unauthenticated_bodies_are_not_read(world: dict[str, Any]) -> None:
    svc: Service = world["service"]
    response = httpx.post(f"{svc.url}/train", content=b"[" * 100_000, headers={"Content-Type": "text/plain"})
    _problem(response, 401)  # not a 415 or a 400: nothing about the request is looked at before the key


def test_openapi_declares_the_bearer_scheme(world: dict[str, Any]) -> None:
    svc: Service = world["service"]
    spec = httpx.get(f"{svc.url}/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": spec["components"]["securitySchemes"]["bearerAuth"]["description"],
    }
    assert spec["paths"]["/jobs"]["get"]["security"] == [{"bearerAuth": []}]
    assert "401" in spec["paths"]["/train"]["post"]["responses"]
    assert spec["paths"]["/healthz"]["get"]["security"] == []
    assert spec["paths"]["/v2/health/ready"]["get"]["security"] == []
    docs = httpx.get(f"{svc.url}/docs")  # Swagger UI shows "Authorize" for the declared scheme
    assert docs.status_code == 200 and "/openapi.json" in docs.text


# --- owners: what another owner's key sees ----------------------------------------------------------------------


def _same_as_unknown(bob: httpx.Client, method: str, path: str, unknown: str, known: str, **kw: Any) -> None:
    """bob gets for alice's object exactly what he gets for one that does not exist."""
    mine = bob.request(method, path.format(known), **kw)
    nothing = bob.request(method, path.format(unknown), **kw)
    assert mine.status_code == nothing.status_code == 404, (path, mine.text, nothing.text)
    a, b = _problem(mine, 404), _problem(nothing, 404)
    assert a["detail"].replace(known, "?") == b["detail"].replace(unknown, "?"), (a, b)


def test_another_owners_job_is_not_found(world: dict[str, Any]) -> None:
    bob: httpx.Client = world["bob"]
    job_id = world["job_id"]
    unknown = "0" * 32
    for suffix in ("", "/logs", "/metrics", "/checkpoints"):
        _same_as_unknown(bob, "GET", "/jobs/{}" + suffix, unknown, job_id)
    _same_as_unknown(bob, "POST", "/jobs/{}/cancel", unknown, job_id)
    assert [j["id"] for j in bob.get("/jobs").json()["items"]] == []
    assert bob.get("/jobs", params={"status": "SUCCEEDED"}).json()["items"] == []


def test_another_owners_checkpoint_is_not_found(world: dict[str, Any]) -> None:
    bob: httpx.Client = world["bob"]
    for path in ("/checkpoints/{}", "/checkpoints/{}/artifact"):
        _same_as_unknown(bob, "GET", path, "0" * 32, world["checkpoint_id"])


def test_another_owners_model_is_not_found(world: dict[str, Any]) -> None:
    bob: httpx.Client = world["bob"]
    for path in ("/models/{}", "/models/{}/versions/1", "/models/{}/versions/1/artifact"):
        _same_as_unknown(bob, "GET", path, "no-such-model", MODEL)
    _same_as_unknown(bob, "PUT", "/models/{}/aliases/prod", "no-such-model", MODEL, json={"version": 1})
    _same_as_unknown(bob, "DELETE", "/models/{}/aliases/champion", "no-such-model", MODEL)
    assert bob.get("/models").json()["items"] == []
    alias = world["alice"].get("/models").json()["items"][0]["aliases"]
    assert alias == {"champion": 1}  # bob's PUT and DELETE changed nothing


def test_another_owners_dataset_is_not_found(world: dict[str, Any]) -> None:
    bob: httpx.Client = world["bob"]
    _same_as_unknown(bob, "GET", "/datasets/{}", "0" * 32, world["dataset_id"])
    assert bob.get("/datasets").json()["items"] == []


def test_inference_on_another_owners_model_is_not_found(world: dict[str, Any]) -> None:
    bob: httpx.Client = world["bob"]
    instances = {"instances": [[1.0, 2.0]]}
    for selector in ({"name": MODEL}, {"name": MODEL, "version": 1}, {"name": MODEL, "alias": "champion"}):
        problem = _problem(bob.post("/predict", json={"model": selector, **instances}), 404)
        assert problem["detail"] == f"No model named {MODEL!r}.", problem
    by_checkpoint = bob.post("/predict", json={"model": {"checkpoint": world["checkpoint_id"]}, **instances})
    assert _problem(by_checkpoint, 404)["detail"] == f"No checkpoint with id {world['checkpoint_id']!r}."
    batch = {"model": {"name": MODEL}, "dataset": {"uri": "rows.csv", "key": "id"}}
    assert _problem(bob.post("/predict", json=batch), 404)["detail"] == f"No model named {MODEL!r}."
    evaluate = {"model": {"name": MODEL}, "dataset": {"uri": "rows.csv"}}
    assert _problem(bob.post("/evaluate", json=evaluate), 404)["detail"] == f"No model named {MODEL!r}."
    tensor = {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP64", "data": [1.0, 2.0]}]}
    for path in (f"/v2/models/{MODEL}/infer", f"/v2/models/{MODEL}/versions/1/infer"):
        problem = _problem(bob.post(path, json=tensor), 404)
        assert problem["error"] == f"No model named {MODEL!r}.", problem
    for path in (f"/v2/models/{MODEL}", f"/v2/models/{MODEL}/versions/1", f"/v2/models/{MODEL}/ready"):
        assert _problem(bob.get(path), 404)["error"] == f"No model named {MODEL!r}.", path
    assert bob.get("/jobs").json()["items"] == []  # nothing was queued


def test_the_owner_and_an_admin_use_the_model(world: dict[str, Any]) -> None:
    tensor = {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP64", "data": [1.0, 2.0]}]}
    for client in (world["alice"], world["root"]):
        predicted = client.post("/predict", json={"model": {"name": MODEL}, "instances": [[1.0, 2.0]]})
        assert predicted.status_code == 200, predicted.text
        assert client.post(f"/v2/models/{MODEL}/infer", json=tensor).status_code == 200
        assert client.get(f"/v2/models/{MODEL}").json()["versions"] == ["1"]
    # bob is refused although alice's request left the resolution in the driver's cache
    assert world["bob"].post("/predict", json={"model": {"name": MODEL}, "instances": [[1.0, 2.0]]}).status_code == 404


def test_a_body_naming_another_owners_dataset_gets_the_unknown_answer(world: dict[str, Any]) -> None:
    bob: httpx.Client = world["bob"]
    known, unknown = world["dataset_id"], "f" * 32
    for path, body in (
        ("/train", lambda uri: _train_body("bob-model", uri=uri)),
        ("/train", lambda uri: {**_train_body("bob-model"), "validation": {"uri": uri}}),
    ):
        mine, nothing = bob.post(path, json=body(known)), bob.post(path, json=body(unknown))
        a, b = _problem(mine, 422), _problem(nothing, 422)
        assert a["errors"][0]["loc"] == b["errors"][0]["loc"]
        assert a["detail"].replace(known, "?") == b["detail"].replace(unknown, "?"), (a, b)
    layers = [{"type": "lstm", "units": 4}, {"type": "output", "units": 1, "loss": "mse"}]
    sequence = {"name": "bob-seq", "framework": "torch", "network": {"layers": layers},
                "dataset": {"uri": "rows.csv", "features": ["x1"], "label": "y", "task": "regression",
                            "sequence": {"labels_uri": known}}}  # fmt: skip
    problem = _problem(bob.post("/train", json=sequence), 422)
    assert [e["loc"] for e in problem["errors"]] == ["dataset.sequence.labels_uri"], problem  # dataset.sequence
    assert bob.get("/jobs").json()["items"] == []


def test_resuming_from_another_owners_checkpoint_gets_the_unknown_answer(world: dict[str, Any]) -> None:
    bob: httpx.Client = world["bob"]
    body = {
        "name": "bob-torch",
        "framework": "torch",
        "dataset": {"uri": "rows.csv", "features": ["x1", "x2"], "label": "y", "task": "regression"},
        "network": {"layers": [{"type": "output", "units": 1, "activation": "identity", "loss": "mse"}]},
        "training": {"epochs": 2, "resume_from": world["checkpoint_id"]},
    }
    problem = _problem(bob.post("/train", json=body), 422)
    assert problem["errors"][0]["loc"] == "training.resume_from", problem
    assert problem["detail"] == f"training.resume_from: no checkpoint with id {world['checkpoint_id']!r}"


def test_starting_from_another_owners_model_gets_the_unknown_answer(world: dict[str, Any]) -> None:
    body = {
        "name": "bob-torch",
        "framework": "torch",
        "dataset": {"uri": "rows.csv", "features": ["x1", "x2"], "label": "y", "task": "regression"},
        "network": {"layers": [{"type": "output", "units": 1, "activation": "identity", "loss": "mse"}]},
        "training": {"epochs": 2, "init_from": {"name": MODEL}},
    }
    problem = _problem(world["bob"].post("/train", json=body), 422)
    assert problem["errors"][0]["loc"] == "training.init_from", problem
    assert f"No model named {MODEL!r}" in problem["detail"], problem
    admin = _problem(world["root"].post("/train", json={**body, "name": "root-torch"}), 422)  # it sees the model
    assert "is a spark_ml model; a torch network starts only from a torch model's weights" in admin["detail"], admin


def test_a_tune_space_cannot_reach_another_owners_model_dataset_or_checkpoint(world: dict[str, Any]) -> None:
    """A search's choices are vetted as /train vets a body: trials wrote a version into another owner's model,
    trained on another owner's dataset and resumed from another owner's checkpoint (audit, 2026-12-06)."""
    bob: httpx.Client = world["bob"]
    torch_base = {
        "framework": "torch",
        "dataset": {"uri": "rows.csv", "features": ["x1", "x2"], "label": "y", "task": "regression"},
        "network": {"layers": [{"type": "output", "units": 1, "activation": "identity", "loss": "mse"}]},
        "training": {"epochs": 2, "num_workers": 1},
    }
    for base, path, values, status in (
        (_train_body("x"), "name", ["bob-free-name", MODEL], 422),  # a name cannot be searched at all
        (_train_body("x"), "dataset.uri", ["rows.csv", world["dataset_id"]], 422),
        (torch_base, "training.resume_from", [world["checkpoint_id"]], 422),
    ):
        body = {"name": "bob-tune", "base": base, "space": {path: {"type": "choice", "values": values}}, "trials": 2}
        if path == "training.resume_from":
            body["base"] = {**torch_base, "training": {**torch_base["training"], "resume_from": None}}
        problem = _problem(bob.post("/tune", json=body), status)
        assert f"space.{path}" in problem["detail"], problem
        assert world["dataset_id"] in problem["detail"] or path != "dataset.uri", problem
    # in the base itself: named at the field inside the base (it said training.resume_from)
    base = {**torch_base, "training": {**torch_base["training"], "resume_from": world["checkpoint_id"]}}
    space = {"training.epochs": {"type": "choice", "values": [1, 2]}}
    problem = _problem(bob.post("/tune", json={"name": "bob-tune", "base": base, "space": space, "trials": 2}), 422)
    assert [e["loc"] for e in problem["errors"]] == ["base.training.resume_from"], problem
    assert bob.get("/jobs").json()["items"] == []


def test_training_into_another_owners_model_name_is_a_409(world: dict[str, Any]) -> None:
    bob: httpx.Client = world["bob"]
    problem = _problem(bob.post("/train", json=_train_body(MODEL)), 409)
    assert "belongs to another owner" in problem["detail"] and "Choose another name" in problem["detail"]
    assert bob.get("/jobs").json()["items"] == []


def test_each_owner_sees_its_own_and_an_admin_sees_all(world: dict[str, Any]) -> None:
    alice, bob, root = world["alice"], world["bob"], world["root"]
    mine = bob.post("/datasets", json={"uri": "rows.csv", "name": "bob-rows"})
    assert mine.status_code == 201 and mine.json()["owner"] == "bob"
    assert [d["name"] for d in bob.get("/datasets").json()["items"]] == ["bob-rows"]
    assert [d["name"] for d in alice.get("/datasets").json()["items"]] == ["alice-rows"]
    assert {d["name"] for d in root.get("/datasets").json()["items"]} == {"alice-rows", "bob-rows"}
    assert alice.get(f"/datasets/{mine.json()['id']}").status_code == 404
    assert root.get(f"/datasets/{mine.json()['id']}").status_code == 200
    assert [j["owner"] for j in alice.get("/jobs").json()["items"]] == ["alice"]
    assert world["job_id"] in [j["id"] for j in root.get("/jobs").json()["items"]]
    assert root.get(f"/jobs/{world['job_id']}").json()["owner"] == "alice"
    assert root.get(f"/checkpoints/{world['checkpoint_id']}").status_code == 200
    assert alice.get(f"/checkpoints/{world['checkpoint_id']}").status_code == 200
    assert [m["name"] for m in root.get("/models").json()["items"]] == [MODEL]
    assert root.get(f"/models/{MODEL}/versions/1").status_code == 200
    moved = root.put(f"/models/{MODEL}/aliases/audited", json={"version": 1})
    assert moved.status_code == 200, moved.text
    assert root.delete(f"/models/{MODEL}/aliases/audited").status_code == 204


def test_one_model_reads_with_its_versions_and_aliases(world: dict[str, Any]) -> None:
    alice: httpx.Client = world["alice"]
    one = alice.get(f"/models/{MODEL}")
    assert one.status_code == 200, one.text
    body = one.json()
    assert body == alice.get("/models").json()["items"][0]  # what the list says of it
    assert body["name"] == MODEL and body["aliases"] == {"champion": 1} and body["latest_version"] == 1
    assert [v["version"] for v in body["versions"]] == [1] and body["versions"][0]["job_id"] == world["job_id"]


def test_an_alias_body_with_an_unknown_field_is_refused(world: dict[str, Any]) -> None:
    alice: httpx.Client = world["alice"]
    wrong = alice.put(f"/models/{MODEL}/aliases/staging", json={"ver": 1})
    problem = _problem(wrong, 422)
    assert any("ver" in str(e.get("loc")) for e in problem["errors"]), problem
    assert "staging" not in alice.get(f"/models/{MODEL}").json()["aliases"]


def test_cluster_shows_addresses_and_every_running_job_to_an_admin_only(world: dict[str, Any]) -> None:
    """Any key read the database and broker URLs and every owner's running job ids on /cluster (audit)."""
    from app.core.auth import Caller
    from app.services.access import visible_job_ids

    bob, root = world["bob"], world["root"]
    seen = bob.get("/cluster").json()["driver"]
    assert "database" not in seen and "broker" not in seen, seen
    assert {"database", "broker"} <= set(root.get("/cluster").json()["driver"])
    # nor the executors' host:port or the driver's process id (security walkthrough)
    theirs, admins = bob.get("/cluster").json(), root.get("/cluster").json()
    assert "pid" not in theirs["driver"] and admins["driver"]["pid"] > 0
    assert (
        theirs["driver"]["worker_id"].startswith("***:***:")
        and str(admins["driver"]["pid"]) in admins["driver"]["worker_id"]
    )
    assert {e["host_port"] for e in theirs["executors"]} == {"***"}
    assert all(e["host_port"] != "***" for e in admins["executors"]) and admins["executors"]
    db, job = world["service"].runtime.db, world["job_id"]
    assert visible_job_ids(db=db, job_ids=[job, "f" * 32], caller=Caller("bob", admin=False)) == []
    assert visible_job_ids(db=db, job_ids=[job, "f" * 32], caller=Caller("alice", admin=False)) == [job]
    assert visible_job_ids(db=db, job_ids=[job, "f" * 32], caller=Caller("root", admin=True)) == [job, "f" * 32]
