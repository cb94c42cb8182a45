"""``sparktrain models delete``, ``models tag``/``untag`` and ``alias NAME ALIAS`` (one alias shown) against the
real service (docs/cli.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from app.db.session import transaction
from app.services import models
from tests.helpers import Service, running_service
from tests.sparktrain.test_cli import cli


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running_service(spark, tmp_path_factory.mktemp("cli-registry"), in_process_consumer=False) as service:
        yield service


def _register(svc: Service, name: str, count: int = 1) -> None:
    with transaction(svc.runtime.db) as session:
        for _ in range(count):
            models.register_version(session=session, name=name, framework="torch", artifact_uri="file:///x",
                                    metrics={}, params={}, job_id=None)  # fmt: skip


def test_tag_untag_a_model_and_a_version(svc: Service) -> None:
    _register(svc, "cli-tags")
    done = cli(svc, "models", "tag", "cli-tags", "team", "fraud")
    assert done.returncode == 0 and done.stdout.strip() == "tag team of cli-tags set", done.stderr
    done = cli(svc, "--json", "models", "tag", "cli-tags", "--version", "1", "stage", "checked by bob")
    assert done.returncode == 0 and json.loads(done.stdout)["value"] == "checked by bob", done.stderr
    model = svc.client.get("/models/cli-tags").json()
    assert model["tags"] == {"team": "fraud"} and model["versions"][0]["tags"] == {"stage": "checked by bob"}
    listed = {m["name"]: m for m in json.loads(cli(svc, "--json", "models").stdout)}
    assert listed["cli-tags"]["tags"] == {"team": "fraud"}  # the plain list is still `models`

    done = cli(svc, "models", "untag", "cli-tags", "--version", "1", "stage")
    assert done.returncode == 0 and done.stdout.strip() == "tag stage of cli-tags version 1 removed", done.stderr
    again = cli(svc, "models", "untag", "cli-tags", "--version", "1", "stage")
    assert again.returncode == 2 and "404" in again.stderr and "no tag 'stage'" in again.stderr, again.stderr
    bad = cli(svc, "models", "tag", "cli-tags", " team", "x")
    assert bad.returncode == 2 and "422" in bad.stderr and "not a tag key" in bad.stderr, bad.stderr


def test_delete_a_version_then_the_model(svc: Service) -> None:
    _register(svc, "cli-delete", count=3)
    done = cli(svc, "models", "delete", "cli-delete", "--version", "3")
    assert done.returncode == 0 and done.stdout.strip() == "model cli-delete version 3 deleted", done.stderr
    assert [v["version"] for v in svc.client.get("/models/cli-delete").json()["versions"]] == [1, 2]
    again = cli(svc, "models", "delete", "cli-delete", "--version", "3")
    assert again.returncode == 2 and "was deleted" in again.stderr, again.stderr
    typo = cli(svc, "models", "delete", "cli-delete:2")  # never the whole model by a slip of NAME:VERSION
    assert typo.returncode == 2 and "--version" in typo.stderr, typo.stderr
    assert svc.client.get("/models/cli-delete").status_code == 200

    done = cli(svc, "--json", "models", "delete", "cli-delete")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"name": "cli-delete", "version": None, "deleted": True}
    assert svc.client.get("/models/cli-delete").status_code == 404
    gone = cli(svc, "models", "delete", "cli-delete")
    assert gone.returncode == 2 and "No model named 'cli-delete'" in gone.stderr, gone.stderr


def test_alias_name_alias_shows_the_version_it_names(svc: Service) -> None:
    _register(svc, "cli-alias", count=2)
    assert cli(svc, "alias", "cli-alias:2", "champion").returncode == 0
    shown = cli(svc, "alias", "cli-alias", "champion")
    assert shown.returncode == 0 and shown.stdout.strip() == "alias champion of cli-alias names version 2", shown
    as_json = json.loads(cli(svc, "--json", "alias", "cli-alias", "champion").stdout)
    assert as_json["version"] == 2 and as_json["aliases"] == ["champion"], as_json
    missing = cli(svc, "alias", "cli-alias", "nope")
    assert missing.returncode == 2 and "no alias 'nope'" in missing.stderr, missing.stderr
    assert cli(svc, "alias", "cli-alias@champion", "x").returncode == 2  # NAME@ALIAS is not a MODEL here


def test_a_key_or_alias_of_dots_alone_is_exit_2_and_deletes_nothing(svc: Service) -> None:
    """HTTP clients remove ``.`` and ``..`` segments from a URL: ``untag m ..`` was sent as ``DELETE /models/m``
    and deleted the model (``--version 2``: the version), ``alias --delete m ..`` likewise."""
    _register(svc, "cli-dots", count=2)
    assert cli(svc, "alias", "cli-dots:2", "champion").returncode == 0
    for args in (
        ("models", "untag", "cli-dots", ".."),
        ("models", "untag", "cli-dots", "..", "--version", "2"),
        ("models", "untag", "cli-dots", "."),
        ("models", "tag", "cli-dots", "..", "x"),
        ("alias", "--delete", "cli-dots", ".."),
        ("alias", "cli-dots", ".."),
        ("alias", "cli-dots:2", "."),
    ):
        done = cli(svc, *args)
        assert done.returncode == 2 and "only dots" in done.stderr, (args, done.stdout, done.stderr)
    model = svc.client.get("/models/cli-dots").json()
    assert [v["version"] for v in model["versions"]] == [1, 2] and model["aliases"] == {"champion": 2}, model
