"""Text that cannot be stored, logged or answered as it is (security walkthrough F5, F6), over real HTTP: a lone
surrogate or a NUL byte is a 422 naming the field, never a 500; a line break in a refused path cannot start a made-up
line of the log."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import LINEAR_ROWS, OWNER_KEYS_SETTING, Service, problem, running_service

JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    base = tmp_path_factory.mktemp("text")
    (base / "data").mkdir()
    (base / "data" / "rows.csv").write_text(LINEAR_ROWS)
    with running_service(spark, base, data_roots=[base / "data"], api_keys=OWNER_KEYS_SETTING) as service:
        service.client.headers["Authorization"] = f"Bearer {OWNER_KEYS_SETTING.split(':')[0]}"
        yield service


@pytest.mark.parametrize(
    ("path", "body", "loc"),
    [("/datasets", b'{"uri": "rows\\ud800.csv"}', "uri"),
     ("/train", b'{"name": "a\\ud800", "framework": "torch"}', "name"),
     ("/predict", b'{"model": {"name": "m\\udfff"}, "instances": [[1]]}', "model.name")],
)  # fmt: skip
def test_a_lone_surrogate_is_a_422_at_its_field(svc: Service, path: str, body: bytes, loc: str) -> None:
    found = problem(svc.client.post(path, content=body, headers=JSON), 422)
    assert found["errors"][0]["loc"] == loc and "holds an unpaired surrogate (\\ud" in found["detail"], found


def test_a_problem_that_echoes_a_lone_surrogate_is_still_answered(svc: Service) -> None:
    """Where no check of the body's text reaches (an object's key): the 422 that echoes it could not be encoded as
    UTF-8, and became a 500."""
    body = b'{"uri": "rows.csv", "n\\ud800me": 1}'
    found = problem(svc.client.post("/datasets", content=body, headers=JSON), 422)
    assert 'got "n\\ud800me"' in found["detail"], found  # pydantic's words for a key it cannot read as text


def test_a_nul_separator_is_a_422_at_the_option(svc: Service) -> None:
    found = problem(svc.client.post("/datasets", json={"uri": "rows.csv", "options": {"sep": "\u0000"}}), 422)
    assert found["errors"][0]["loc"] == "options" and found["detail"].startswith('options: "sep": '), found
    assert svc.client.get("/datasets").json()["items"] == []


def test_a_line_break_in_a_refused_path_is_logged_as_an_escape(svc: Service, caplog: pytest.LogCaptureFixture) -> None:
    forged = "2026-12-07 17:00:00,000 INFO sparktrain: FORGED LINE"
    with caplog.at_level(logging.WARNING, logger="sparktrain.api.auth"):
        response = svc.client.get(f"/x%0A{forged.replace(' ', '%20')}", headers={"Authorization": "Bearer nope"})
    problem(response, 401)
    refused = [r.getMessage() for r in caplog.records if r.name == "sparktrain.api.auth"]
    assert refused and all("\n" not in line for line in refused), refused
    assert f"refused GET /x\\n{forged} from " in refused[0], refused
