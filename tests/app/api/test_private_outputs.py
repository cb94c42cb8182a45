"""Batch prediction outputs are private to their owner, over real HTTP on SQLite and PostgreSQL.

alice writes two batch predictions into the data roots (one at her own ``output_uri``, one at the default place).
bob (another key) names them as datasets in every way a body can: each answers exactly as a path that does not
exist, a directory that holds one is refused, and no new output may be written inside one. alice and an admin read
them (docs/security.md, "Owners")."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import ENDED as TERMINAL
from tests.helpers import LINEAR_ROWS as ROWS
from tests.helpers import OWNER_KEYS_SETTING, owner_clients, pg_database, running_service
from tests.helpers import finished as _finished
from tests.helpers import linear_train_body as _train
from tests.helpers import problem as _problem


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request: pytest.FixtureRequest, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    base = tmp_path_factory.mktemp("outputs")
    data = base / "data"
    data.mkdir()
    (data / "rows.csv").write_text(ROWS)
    if request.param == "sqlite":
        from contextlib import nullcontext

        database: Any = nullcontext(f"sqlite:///{base / 'outputs.db'}")
    else:
        database = pg_database(request.getfixturevalue("pg_server"))
    with (
        database as db_url,
        running_service(spark, base, database_url=db_url, data_roots=[data], api_keys=OWNER_KEYS_SETTING) as svc,
        owner_clients(svc) as clients,
    ):
        alice, bob = clients["alice"], clients["bob"]
        _finished(svc, alice.post("/train", json=_train("alice-model")))
        _finished(svc, bob.post("/train", json=_train("bob-model")))
        batch = {"model": {"name": "alice-model"}, "dataset": {"uri": "rows.csv", "key": "id"}}
        mine = _finished(svc, alice.post("/predict", json={**batch, "output_uri": "alice-out"}))
        default = _finished(svc, alice.post("/predict", json=batch))
        yield {"svc": svc, **clients, "data": data, "job": mine, "default": default["request"]["output_uri"]}


def _unknown_answer(response: httpx.Response, nothing: httpx.Response, known: str, unknown: str) -> None:
    """bob's request naming alice's output got exactly what the same request naming no file gets."""
    a, b = _problem(response, 422), _problem(nothing, 422)
    assert a["errors"][0]["loc"] == b["errors"][0]["loc"], (a, b)
    assert a["detail"].replace(known, "?") == b["detail"].replace(unknown, "?"), (a, b)
    assert "does not exist in the data roots" in a["detail"], a


def test_another_owners_output_answers_as_a_path_that_does_not_exist(world: dict[str, Any]) -> None:
    bob: httpx.Client = world["bob"]
    part = next(p for p in (world["data"] / "alice-out").iterdir() if p.name.startswith("part-"))
    default = world["default"]
    for known in (
        "alice-out",
        str(world["data"] / "alice-out"),
        f"alice-out/{part.name}",
        default,
        f"file://{default}",
    ):
        unknown = "no-such-output"
        requests = (
            ("/datasets", lambda uri: {"uri": uri}),
            ("/train", lambda uri: _train("bob-model-2", uri)),
            ("/train", lambda uri: {**_train("bob-model-2"), "validation": {"uri": uri}}),
            ("/evaluate", lambda uri: {"model": {"name": "bob-model"}, "dataset": {"uri": uri}}),
            ("/predict", lambda uri: {"model": {"name": "bob-model"}, "dataset": {"uri": uri, "key": "id"}}),
        )
        for path, body in requests:
            _unknown_answer(bob.post(path, json=body(known)), bob.post(path, json=body(unknown)), known, unknown)
    assert not [j for j in bob.get("/jobs").json()["items"] if j["type"] != "train"]  # nothing was queued
    assert bob.get("/datasets").json()["items"] == []


def test_a_directory_holding_another_owners_output_is_refused(world: dict[str, Any]) -> None:
    bob: httpx.Client = world["bob"]
    for uri in ("predictions", str(world["data"])):
        problem = _problem(bob.post("/datasets", json={"uri": uri, "options": {"recursiveFileLookup": "true"}}), 422)
        assert "holds another owner's batch prediction output" in problem["detail"], problem
    # bob's own file beside them is his to read
    (world["data"] / "bob.csv").write_text(ROWS)
    assert bob.post("/datasets", json={"uri": "bob.csv"}).status_code == 201


def test_a_link_in_a_directory_to_another_owners_output_is_refused(world: dict[str, Any]) -> None:
    """A link inside a data root ("latest", made by a team) to alice's output, or to a file of it: bob registered
    and trained on her predictions (operator walkthrough)."""
    bob: httpx.Client = world["bob"]
    output = world["data"] / "alice-out"
    part = next(p for p in output.iterdir() if p.name.startswith("part-"))
    made = []
    for name, entry, target in (("linked-file", "part-0.parquet", part), ("linked-dir", "p=1", output)):
        (world["data"] / name).mkdir()
        (world["data"] / name / entry).symlink_to(target)
        made.append(world["data"] / name)
    try:
        for name in ("linked-file", "linked-dir"):
            for path, body in (("/datasets", {"uri": name}), ("/train", _train("bob-model-3", name))):
                problem = _problem(bob.post(path, json=body), 422)
                assert "holds a link to another owner's batch prediction output" in problem["detail"], problem
            assert world["alice"].post("/datasets", json={"uri": name}).status_code == 201  # hers to read
        # a link made after a job was queued, to an output older than the job, is refused when the job starts too
        from datetime import timedelta

        from app.core.errors import ValidationFailed
        from app.db.base import utcnow
        from app.db.session import transaction
        from app.services import jobs, outputs
        from workers.data.spec import ResolvedDataset

        svc, later = world["svc"], world["data"] / "linked-later"
        later.mkdir()
        made.append(later)
        (later / "bob.csv").write_text(ROWS)
        with transaction(svc.runtime.db) as session:
            queued, _ = jobs.create_job(session=session, job_type="train", request={}, owner="bob")
            queued.created_at = utcnow() + timedelta(minutes=1)  # queued after alice's output was written
        plan = ResolvedDataset(path=str(later), format="csv", features=("x1",), label="y", task="regression")
        (later / "p=1").symlink_to(output)
        with svc.runtime.db() as session, pytest.raises(ValidationFailed, match="holds a link to another owner's"):
            outputs.check_job(session, job_id=queued.id, owner="bob", plan=plan, roots=[world["data"]])
    finally:
        for directory in made:
            shutil.rmtree(directory)


def test_the_unfinished_output_is_hidden_too(world: dict[str, Any]) -> None:
    """The directory a prediction writes before its rename (``.<name>.partial-<job>-<attempt>``)."""
    partial = world["data"] / f".late.partial-{world['job']['id']}-1"
    shutil.copytree(world["data"] / "alice-out", partial)
    try:
        bob: httpx.Client = world["bob"]
        known, unknown = partial.name, "no-such-output"
        _unknown_answer(bob.post("/datasets", json={"uri": known}), bob.post("/datasets", json={"uri": unknown}),
                        known, unknown)  # fmt: skip
        assert world["alice"].post("/datasets", json={"uri": known}).status_code == 201
    finally:
        shutil.rmtree(partial)


def test_no_output_is_written_inside_an_output_or_where_one_is_queued(world: dict[str, Any]) -> None:
    body = {"model": {"name": "bob-model"}, "dataset": {"uri": "rows.csv", "key": "id"}}
    for client, model in ((world["bob"], "bob-model"), (world["alice"], "alice-model")):
        answer = client.post("/predict", json={**body, "model": {"name": model}, "output_uri": "alice-out/more"})
        assert "lies inside the output of a batch prediction" in _problem(answer, 422)["detail"]
    # a prediction that is queued but has not written yet: its path is taken until it ends
    from app.core.jobstates import JobStatus
    from app.db.session import transaction
    from app.services import jobs, outputs

    svc = world["svc"]
    target = str(world["data"] / "queued-out")
    with transaction(svc.runtime.db) as session:
        queued, _ = jobs.create_job(session=session, job_type="predict", request={"output_uri": target}, owner="alice")
        queued.output_path, queued.output_key = target, outputs.key(target)
    for uri, says in (("queued-out", "where a queued batch prediction will write"), ("queued-out/in", "lies inside")):
        answer = world["bob"].post("/predict", json={**body, "output_uri": uri})
        assert says in _problem(answer, 422)["detail"], answer.text
    with transaction(svc.runtime.db) as session:
        jobs.transition(session=session, job_id=queued.id, sources=[JobStatus.QUEUED], target=JobStatus.CANCELLED)
    written = world["bob"].post("/predict", json={**body, "output_uri": "queued-out"})
    assert written.status_code == 202, written.text
    assert svc.wait(written.json()["id"], TERMINAL)["status"] == "SUCCEEDED"


def test_the_owner_and_an_admin_read_the_output(world: dict[str, Any]) -> None:
    # (the data root holds bob's output of the test above: only the admin reads it whole)
    for client, uris in ((world["alice"], ()), (world["root"], (str(world["data"]),))):
        for uri in ("alice-out", world["default"], "predictions", *uris):
            registered = client.post("/datasets", json={"uri": uri, "options": {"recursiveFileLookup": "true"}})
            assert registered.status_code == 201, (uri, registered.text)
    rows = world["alice"].post("/datasets", json={"uri": "alice-out"}).json()
    assert rows["row_count"] == 40 and {c["name"] for c in rows["schema"]} >= {"id", "prediction"}, rows
    # the owner trains on it (her predictions as a feature): planned and queued, not refused
    body = {**_train("alice-second"), "dataset": {"uri": "alice-out", "features": ["prediction"], "label": "id",
                                                   "task": "regression"}}  # fmt: skip
    assert world["alice"].post("/train", json=body).status_code == 202


def _record(svc: Any, owner: str, path: Path, status: str, created: Any = None) -> str:
    """A prediction job's row as jobs.submit records it (its output at ``path``), in ``status``."""
    from app.db.session import transaction
    from app.services import jobs, outputs

    with transaction(svc.runtime.db) as session:
        row, _ = jobs.create_job(session=session, job_type="predict", request={"output_uri": str(path)}, owner=owner)
        row.output_path, row.output_key, row.status = str(path), outputs.key(str(path)), status
        if created is not None:
            row.created_at = created
        return row.id


def _output(data: Path, path: Path, job_id: str | None) -> None:
    """A written output (a copy of alice's) with the marker naming the job that wrote it."""
    shutil.copytree(data / "alice-out", path)
    (path / "_SPARKTRAIN_JOB").unlink()
    if job_id is not None:
        (path / "_SPARKTRAIN_JOB").write_text(job_id)


def test_whose_an_output_is_follows_the_job_that_wrote_it(world: dict[str, Any]) -> None:
    """Review of the first version: the newest record decided, so a second job queued at the same path (which then
    failed, finding the output there) handed the output to its owner; a cancelled job that wrote nothing still
    claimed its path; a retry's old output (``.<name>.old-<hex>``) was readable; a queued output below a new
    ``output_uri`` was not seen."""
    svc, data, alice, bob = world["svc"], world["data"], world["alice"], world["bob"]
    first = _record(svc, "alice", data / "raced", "SUCCEEDED")
    _record(svc, "bob", data / "raced", "FAILED")  # queued second, found alice's output there
    _output(data, data / "raced", first)
    assert bob.post("/datasets", json={"uri": "raced"}).status_code == 422
    assert alice.post("/datasets", json={"uri": "raced"}).status_code == 201

    _record(svc, "alice", data / "reports", "CANCELLED")  # never wrote: the path is free
    body = {"model": {"name": "bob-model"}, "dataset": {"uri": "rows.csv", "key": "id"}, "output_uri": "reports/q1"}
    written = bob.post("/predict", json=body)
    assert written.status_code == 202, written.text
    assert svc.wait(written.json()["id"], TERMINAL)["status"] == "SUCCEEDED"
    assert bob.post("/datasets", json={"uri": "reports/q1"}).status_code == 201

    _output(data, data / ".alice-out.old-0123abcd", None)
    known, unknown = ".alice-out.old-0123abcd", "no-such-output"
    _unknown_answer(bob.post("/datasets", json={"uri": known}), bob.post("/datasets", json={"uri": unknown}),
                    known, unknown)  # fmt: skip

    _record(svc, "alice", data / "nest" / "b" / "out", "QUEUED")
    problem = _problem(bob.post("/predict", json={**body, "output_uri": "nest"}), 422)
    assert "would hold the output of a queued batch prediction" in problem["detail"], problem


def test_no_path_spark_would_read_as_a_pattern(world: dict[str, Any]) -> None:
    """A directory named ``*`` or ``{a,..}`` (an ``output_uri`` could make one) read every output beside it, or
    the parent's parent (review of the first version)."""
    bob: httpx.Client = world["bob"]
    body = {"model": {"name": "bob-model"}, "dataset": {"uri": "rows.csv", "key": "id"}}
    for name in ("predictions/*", "{a,..}", "out[1]"):
        problem = _problem(bob.post("/predict", json={**body, "output_uri": name}), 422)
        assert "as a pattern" in problem["detail"], problem
    (world["data"] / "{rows,..}").mkdir()
    (world["data"] / "{rows,..}" / "x.csv").write_text(ROWS)
    for client in (bob, world["root"]):
        problem = _problem(client.post("/datasets", json={"uri": "{rows,..}"}), 422)
        assert "as a pattern" in problem["detail"], problem


def test_a_job_checks_again_when_it_starts(world: dict[str, Any]) -> None:
    """bob's job reads a directory that held nothing private when he asked; alice's output lands in it before
    the job starts: the job fails as if the data were not there (app/jobs/dispatch.py checks the plan)."""
    from datetime import timedelta

    from app.core.errors import ValidationFailed
    from app.db.base import utcnow
    from app.db.session import transaction
    from app.services import jobs, outputs
    from workers.data.spec import ResolvedDataset

    svc, data = world["svc"], world["data"]
    (data / "shared").mkdir()
    (data / "shared" / "bob.csv").write_text(ROWS)
    with transaction(svc.runtime.db) as session:
        queued, _ = jobs.create_job(session=session, job_type="train", request={}, owner="bob")
        queued.created_at = utcnow() - timedelta(minutes=1)
    plan = ResolvedDataset(path=str(data / "shared"), format="csv", features=("x1",), label="y", task="regression")
    with svc.runtime.db() as session:
        outputs.check_job(session, job_id=queued.id, owner="bob", plan=plan, roots=[data])  # nothing private yet
    _output(data, data / "shared" / "alice-late", _record(svc, "alice", data / "shared" / "alice-late", "SUCCEEDED"))
    with svc.runtime.db() as session, pytest.raises(ValidationFailed, match="holds another owner's"):
        outputs.check_job(session, job_id=queued.id, owner="bob", plan=(plan,), roots=[data])
    with svc.runtime.db() as session:  # alice's own job, or an output older than the job: no change
        outputs.check_job(session, job_id=queued.id, owner="alice", plan=plan, roots=[data])
