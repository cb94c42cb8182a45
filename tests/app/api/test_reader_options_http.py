"""Reader options cannot point Spark at other files (security walkthrough F1), over real HTTP and a real Spark.

``fs.defaultFS`` with a ViewFS mount table in ``options`` mounted the checked directory onto one outside the data
roots, and any key read what the driver could read. Every body that names a dataset refuses such options; so do
a registered dataset stored before the allow-list (named by its id, or read for its summary), and a search space
over ``dataset.options``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from app.db.models import Dataset
from app.services.datasets import registry
from tests.helpers import LINEAR_ROWS, Service, linear_train_body, problem, running_service

SECRET = "db_password,hunter2\n" * 50


@pytest.fixture(scope="module")
def world(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("options")
    data, secret = base / "data", base / "secret"
    for directory in (data / "inroot", secret):
        directory.mkdir(parents=True)
    (data / "rows.csv").write_text(LINEAR_ROWS)
    (data / "inroot" / "part.csv").write_text(LINEAR_ROWS)
    (secret / "secret.csv").write_text(SECRET)
    with running_service(spark, base, data_roots=[data]) as svc:
        yield {"svc": svc, "data": data, "secret": secret, "spark": spark}


def _viewfs(world: dict[str, Any]) -> dict[str, str]:
    """The walkthrough's options: the checked directory ``inroot`` mounted onto the secret directory."""
    name = f"evil{uuid.uuid4().hex[:8]}"
    return {"header": "false", "fs.defaultFS": f"viewfs://{name}",
            f"fs.viewfs.mounttable.{name}.link.{world['data'] / 'inroot'}": f"file://{world['secret']}"}  # fmt: skip


def _refused(svc: Service, path: str, body: dict[str, Any], loc: str) -> dict[str, Any]:
    found = problem(svc.client.post(path, json=body), 422)
    assert [e["loc"] for e in found["errors"]] == [loc], found
    assert '"fs.defaultFS" is not a reader option' in found["detail"], found
    assert "hunter2" not in str(found)
    return found


def test_a_mount_table_in_the_options_is_refused_wherever_a_dataset_is_named(world: dict[str, Any]) -> None:
    svc: Service = world["svc"]
    options = _viewfs(world)
    found = _refused(svc, "/datasets", {"uri": "inroot", "format": "csv", "options": options}, "options")
    assert "(a Hadoop or Spark setting, which a request may not change)" in found["detail"]
    assert "sep" in found["detail"] and "multiLine" in found["detail"]  # what is taken instead
    train = linear_train_body("viewfs-model", "inroot")
    train["dataset"] = {**train["dataset"], "format": "csv", "options": options}
    _refused(svc, "/train", train, "dataset.options")
    _refused(svc, "/train", {**linear_train_body("viewfs-model"), "validation": {"uri": "inroot", "options": options}},
             "validation.options")  # fmt: skip
    batch = {"uri": "inroot", "key": "id", "options": options}
    _refused(svc, "/predict", {"model": {"name": "none"}, "dataset": batch}, "dataset.options")
    _refused(svc, "/evaluate", {"model": {"name": "none"}, "dataset": batch}, "dataset.options")
    assert svc.client.get("/datasets").json()["items"] == [] and svc.client.get("/jobs").json()["items"] == []


def test_a_search_space_over_the_options_is_refused(world: dict[str, Any]) -> None:
    svc: Service = world["svc"]
    space = {"dataset.options": {"type": "choice", "values": [{"sep": ","}, _viewfs(world)]}}
    base = linear_train_body("viewfs-tune")
    base["dataset"] = {**base["dataset"], "options": {"sep": ","}}
    body = {"name": "viewfs-tune", "base": base, "space": space, "trials": 2}
    found = problem(svc.client.post("/tune", json=body), 422)
    assert "space.dataset.options" in found["detail"] and '"fs.defaultFS" is not a reader option' in found["detail"]
    assert svc.client.get("/jobs").json()["items"] == []


def _stored(world: dict[str, Any], options: dict[str, str], summary: str) -> str:
    """A registration stored before the allow-list, with the options it had then."""
    row = Dataset(id=uuid.uuid4().hex, uri="inroot", resolved_uri=str(world["data"] / "inroot"), format="csv",
                  options={"inferSchema": "true", **options}, schema=[], row_count=None, sample=[], owner="anonymous",
                  summary=summary)  # fmt: skip
    with world["svc"].runtime.db() as session:
        session.add(row)
        session.commit()
    return row.id


def test_a_registration_stored_with_such_options_is_never_read_with_them(world: dict[str, Any]) -> None:
    svc: Service = world["svc"]
    named = _stored(world, _viewfs(world), "complete")
    train = linear_train_body("viewfs-by-id", named)
    train["dataset"] = {**train["dataset"], "features": ["_c0"], "label": "_c1"}
    _refused(svc, "/train", train, "dataset.options")
    pending = _stored(world, _viewfs(world), "pending")  # its summary read with Spark, after the answer
    registry.read_summary(db=svc.runtime.db, spark=world["spark"], dataset_id=pending, stopping=lambda: False)
    read = svc.client.get(f"/datasets/{pending}").json()
    assert read["summary"] == "failed" and read["sample"] == [] and read["row_count"] is None, read
    assert read["summary_error"].startswith('options: "fs.defaultFS" is not a reader option of csv data'), read


def test_an_option_in_another_case_replaces_the_default_it_names(world: dict[str, Any]) -> None:
    """``HEADER`` and the CSV default ``header`` were stored side by side, and Spark kept either one: the option
    is stored as ``header``, and the registration's id is then taken as any other."""
    svc: Service = world["svc"]
    (world["data"] / "headless.csv").write_text("".join(line + "\n" for line in LINEAR_ROWS.splitlines()[1:]))
    registered = svc.client.post("/datasets", json={"uri": "headless.csv", "options": {"HEADER": "false"}})
    assert registered.status_code == 201, registered.text
    read = registered.json()
    assert read["options"] == {"header": "false", "inferSchema": "true"} and read["row_count"] == 40, read
    train = linear_train_body("headless", read["id"])
    train["dataset"] = {**train["dataset"], "features": ["_c0", "_c1"], "label": "_c2"}
    job = svc.train(train)
    assert svc.wait(job["id"], {"SUCCEEDED", "FAILED"})["status"] == "SUCCEEDED"
