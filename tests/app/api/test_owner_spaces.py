"""Per-owner data spaces (``SPARKTRAIN_OWNER_ROOT``), over real HTTP with API keys (docs/security.md, "Owners").

alice has ``<owner_root>/alice/mine.csv``; the shared data root has a ``mine.csv`` too, without the columns a
training needs. alice's relative ``mine.csv`` is her own file (the space is looked in first); bob's is the shared
one, and alice's file by its absolute path is to him exactly a path outside his roots. alice writes batch
predictions only into her space; an admin reads every space. Jobs planned again when they run, and a tune's
trials, use the owner's space too."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.core.auth import Caller
from app.core.settings import Settings
from app.services import spaces
from tests.helpers import ENDED as TERMINAL
from tests.helpers import LINEAR_ROWS as ROWS
from tests.helpers import OWNER_KEYS_SETTING, owner_clients, running_service
from tests.helpers import finished as _finished
from tests.helpers import linear_train_body as _train
from tests.helpers import problem as _problem


@pytest.fixture(scope="module")
def world(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("spaces")
    shared, owner_root = base / "shared", base / "spaces"
    shared.mkdir()
    (shared / "mine.csv").write_text("a,b\n1,2\n")  # no x1, x2, y: a request reading it is a 422
    (owner_root / "alice").mkdir(parents=True)
    (owner_root / "alice" / "mine.csv").write_text(ROWS)
    with (
        running_service(
            spark,
            base,
            data_roots=[shared],
            owner_root=owner_root,
            api_keys=OWNER_KEYS_SETTING,
            owner_quotas={"dave": {"queued_jobs": 3}},
        ) as svc,  # dave: a quota, no key yet
        owner_clients(svc) as clients,
    ):
        yield {"svc": svc, "shared": shared, "spaces": owner_root, "artifacts": base / "artifacts", **clients}


def test_a_relative_path_is_looked_for_in_the_own_space_first(world: dict[str, Any]) -> None:
    # alice's training on it: test_batch_predictions_go_into_the_own_space_only
    assert world["alice"].post("/datasets", json={"uri": "mine.csv"}).json()["resolved_uri"] == str(
        world["spaces"] / "alice" / "mine.csv"
    )
    shared = _problem(world["bob"].post("/train", json=_train("bob-space", "mine.csv")), 422)
    assert "no column" in shared["detail"] and "columns: a (int), b (int)" in shared["detail"], shared  # the shared one


def test_another_owners_space_is_a_path_outside_the_roots(world: dict[str, Any]) -> None:
    bob, owner_root = world["bob"], world["spaces"]
    known, unknown = str(owner_root / "alice" / "mine.csv"), str(owner_root / "carol" / "nothing.csv")
    for body in (lambda uri: ("/train", _train("bob-peek", uri)), lambda uri: ("/datasets", {"uri": uri})):
        path, payload = body(known)
        seen = _problem(bob.post(path, json=payload), 422)
        path, payload = body(unknown)
        nothing = _problem(bob.post(path, json=payload), 422)
        assert seen["detail"].replace(known, "?") == nothing["detail"].replace(unknown, "?"), (seen, nothing)
        assert "outside the configured data roots" in seen["detail"], seen
        assert "alice" not in seen["detail"].replace(known, ""), seen  # bob's roots are named, not hers
    listed = bob.get("/jobs").json()["items"]
    assert not [j for j in listed if j["name"] == "bob-peek"]
    assert not bob.get("/datasets").json()["items"]


def test_batch_predictions_go_into_the_own_space_only(world: dict[str, Any]) -> None:
    alice, svc, own = world["alice"], world["svc"], world["spaces"] / "alice"
    _finished(svc, alice.post("/train", json=_train("alice-pred", "mine.csv")))  # trained on her own file
    batch = {"model": {"name": "alice-pred"}, "dataset": {"uri": "mine.csv", "key": "id"}}
    named = _finished(svc, alice.post("/predict", json={**batch, "output_uri": "out"}))
    assert (own / "out").is_dir() and named["request"]["output_uri"] == str(own / "out")
    default = _finished(svc, alice.post("/predict", json=batch))["request"]["output_uri"]
    assert Path(default).parent == own / "predictions" and Path(default).is_dir()
    work = world["artifacts"] / "jobs" / named["id"]  # a prediction leaves no empty working directory behind
    deadline = time.monotonic() + 30  # removed just after the job's final state is written
    while work.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not work.exists() and (world["artifacts"] / "jobs").is_dir()
    outside = _problem(alice.post("/predict", json={**batch, "output_uri": str(world["shared"] / "out")}), 422)
    assert outside["errors"][0]["loc"] == "output_uri" and str(own) in outside["detail"], outside
    assert not (world["shared"] / "out").exists()
    theirs = world["spaces"] / "bob"  # a link there answered "is a symbolic link": it told alice what bob has
    theirs.mkdir(exist_ok=True)
    (theirs / "link").symlink_to(theirs / "nowhere")
    link, plain = (_problem(alice.post("/predict", json={**batch, "output_uri": str(theirs / name)}), 422)["detail"]
                   for name in ("link", "plain"))  # fmt: skip
    assert link.replace("link", "?") == plain.replace("plain", "?"), (link, plain)
    # an admin's relative output lands where its default output goes, its own space (not owner_root/<first segment>)
    mine = {**batch["dataset"], "uri": str(own / "mine.csv")}  # (to root, mine.csv is the shared one)
    root = world["root"].post("/predict", json={**batch, "dataset": mine, "output_uri": "preds/out"})
    assert root.status_code == 202 and root.json()["request"]["output_uri"] == str(world["spaces"] / "root/preds/out")
    world["svc"].wait(root.json()["id"], TERMINAL)
    assert not (world["spaces"] / "preds").exists()
    # outside every root, an admin is told so (it was told that its key writes only into its own space)
    away = _problem(world["root"].post("/predict", json={**batch, "dataset": mine, "output_uri": "/tmp/x/out"}), 422)
    assert "lies outside the configured data roots" in away["detail"], away


def test_an_admin_reads_every_space(world: dict[str, Any]) -> None:
    uri = str(world["spaces"] / "alice" / "mine.csv")
    response = world["root"].post("/datasets", json={"uri": uri})
    assert response.status_code == 201 and response.json()["resolved_uri"] == uri, response.text


def test_usage_names_the_own_space(world: dict[str, Any]) -> None:
    usage = world["alice"].get("/owners/me/usage").json()
    assert usage["data_space"] == str(world["spaces"] / "alice")
    # made when shown to a key's owner (it was named before it existed, and an operator's copy into it failed)
    bob = world["root"].get("/owners/bob/usage").json()
    assert bob["data_space"] == str(world["spaces"] / "bob") and (world["spaces"] / "bob").is_dir()
    # no key is carol's and she owns nothing: no such owner (it was a 200 with every limit null, which an admin's
    # typo got too), and no folder is made for her
    assert world["root"].get("/owners/carol/usage").status_code == 404
    assert not (world["spaces"] / "carol").exists()
    dave = world["root"].get("/owners/dave/usage").json()  # an owner by his quota: shown, and no folder made for him
    assert dave["data_space"] == str(world["spaces"] / "dave") and not (world["spaces"] / "dave").exists()
    assert dave["quotas"]["queued_jobs"] == {"limit": 3, "used": 0}
    for impossible in ("%2E%2E", "a%20b%3Cx", "bob%0A"):  # no owner has such a name: it answered 200 with no usage
        assert world["root"].get(f"/owners/{impossible}/usage").status_code == 404, impossible
    assert not (world["spaces"].parent / "usage").exists()


def test_a_tunes_trials_read_the_owners_space(world: dict[str, Any]) -> None:
    # the trials are planned by the tune job as it runs, not by the request: with the driver's own roots, the
    # relative mine.csv would be the shared file and every trial a failure
    base = {**_train("alice-tune", "mine.csv"), "params": {"algorithm": "linear_regression", "regParam": 0.0}}
    body = {"name": "alice-tune", "base": base, "space": {"params.regParam": {"type": "choice", "values": [0.0, 1.0]}},
            "sampler": "grid", "trials": 2, "parallel": 1}  # fmt: skip
    done = _finished(world["svc"], world["alice"].post("/tune", json=body))
    assert done["result"]["states"] == {"COMPLETE": 2}, done["result"]


def test_scopes(tmp_path: Path) -> None:
    shared, owner_root = tmp_path / "shared", tmp_path / "spaces"
    keys = "alice-0123456789abcdef:alice, root-0123456789abcdef0:root:admin"
    settings = Settings(var_dir=tmp_path / "var", data_roots=[shared], owner_root=owner_root, api_keys=keys)
    alice = spaces.for_owner(settings, "alice")
    assert alice.data_roots == [owner_root / "alice", shared] and alice.output_roots == [owner_root / "alice"]
    assert (owner_root / "alice").is_dir()
    root = spaces.for_owner(settings, "root")
    assert root.data_roots == [owner_root / "root", shared, owner_root]
    assert root.output_roots == [owner_root / "root", owner_root, shared]  # a relative output: from the last
    assert spaces.for_caller(settings, Caller("alice", admin=True)).data_roots[-1] == owner_root
    assert settings.data_roots == [shared] and settings.output_roots == [shared]  # the driver's own stay as they are
    plain = Settings(var_dir=tmp_path / "var", data_roots=[shared])
    assert spaces.for_caller(plain, Caller("alice", admin=False)) is plain and spaces.space(plain, "alice") is None
    mixed = Settings(var_dir=tmp_path / "var", data_roots=[shared], owner_root=owner_root,
                     api_keys=f"{keys}, alice-admin-0123456789:alice:admin")  # fmt: skip
    assert owner_root not in spaces.for_owner(mixed, "alice").data_roots  # a job's key is not known: the narrower
    nokeys = Settings(var_dir=tmp_path / "var", data_roots=[shared], owner_root=owner_root)
    assert spaces.for_owner(nokeys, "anonymous").data_roots[-1] == owner_root  # no keys: everyone is an admin


@pytest.mark.parametrize("inside", [True, False])
def test_spaces_may_not_overlap_a_data_root(tmp_path: Path, inside: bool) -> None:
    shared = tmp_path / "shared"
    owner_root, roots = (shared / "spaces", [shared]) if inside else (tmp_path, [shared])
    with pytest.raises(ValueError, match="overlap"):
        Settings(var_dir=tmp_path / "var", data_roots=roots, owner_root=owner_root)


@pytest.mark.parametrize(
    ("layout", "words"),
    [  # a data root holding the artifact root let any key read another owner's model files as a dataset
        ({"data_roots": ["."], "artifact_root": "artifacts"}, "and the artifact root"),
        ({"data_roots": ["artifacts/jobs"], "artifact_root": "artifacts"}, "and the artifact root"),
        ({"data_roots": ["."], "artifact_root": "../elsewhere"}, "and the var dir"),  # its databases too
        ({"data_roots": ["../shared"], "owner_root": "artifacts"}, "SPARKTRAIN_OWNER_ROOT"),  # an owner named jobs
    ],
)
def test_data_roots_and_spaces_may_not_overlap_the_services_files(
    tmp_path: Path, layout: dict[str, Any], words: str
) -> None:
    var = tmp_path / "var"
    given = {k: [var / p for p in v] if isinstance(v, list) else var / v for k, v in layout.items()}
    with pytest.raises(ValueError, match="overlap") as info:
        Settings(**{"var_dir": var, "artifact_root": var / "artifacts", **given})
    assert words in str(info.value), info.value
    Settings(var_dir=var, artifact_root=var / "artifacts", data_roots=[var / "data"], owner_root=var / "spaces")
