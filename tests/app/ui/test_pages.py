"""The console's pages: public shells with no data and nothing from outside the service; their assets answer."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlparse

import httpx
import pytest

from app.db.session import transaction
from app.services import models
from tests.helpers import Service, running_service

KEY = "alice-0123456789abcdef"
KEYS = f"{KEY}:alice"
PAGES = ["/ui", "/ui/jobs/0123456789abcdef0123456789abcdef", "/ui/compare?ids=a,b", "/ui/models", "/ui/cluster"]
_REFERENCE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']""")


@pytest.fixture(scope="module")
def keyed_service(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    base: Path = tmp_path_factory.mktemp("ui")
    with running_service(spark, base, api_keys=KEYS, in_process_consumer=False) as svc:
        yield svc


@pytest.fixture(scope="module")
def keyed(keyed_service: Service) -> str:
    return keyed_service.url


@pytest.mark.parametrize("page", PAGES)
def test_a_page_loads_without_a_key_and_names_nothing_outside(keyed: str, page: str) -> None:
    answer = httpx.get(keyed + page)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html")
    assert "This service needs an API key" in answer.text  # the form the scripts show on a 401
    for reference in _REFERENCE.findall(answer.text):
        if reference.startswith("data:"):  # the favicon, inline
            continue
        url = urlparse(urljoin(keyed + page, reference))
        assert f"{url.scheme}://{url.netloc}" == keyed, f"{page} names {reference}, outside the service"
        if url.path.startswith("/ui/static/") or url.path.startswith("/ui/vendor/"):
            assert httpx.get(url.geturl()).status_code == 200, reference


def test_the_charting_library_comes_from_the_installed_plotly_package(keyed: str) -> None:
    page = httpx.get(keyed + "/ui/jobs/x").text
    (script,) = [r for r in _REFERENCE.findall(page) if "plotly" in r]
    answer = httpx.get(keyed + script)
    assert answer.status_code == 200 and len(answer.content) > 1_000_000
    assert answer.headers["content-type"].startswith("text/javascript")
    assert b"plotly.js" in answer.content[:2000]


def test_a_job_id_in_the_url_is_escaped_and_the_data_still_needs_a_key(keyed: str) -> None:
    answer = httpx.get(keyed + "/ui/jobs/%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E")
    assert answer.status_code == 200
    assert "<img src=x" not in answer.text and "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in answer.text
    assert httpx.get(keyed + "/jobs").status_code == 401
    assert httpx.get(keyed + "/ui/static/nope.js").status_code == 404


def test_the_pages_have_an_inline_icon(keyed: str) -> None:
    """So that a browser asks for no /favicon.ico (a 404, or a 401 with keys)."""
    page = httpx.get(keyed + "/ui").text
    (icon,) = re.findall(r'<link rel="icon" href="([^"]+)"', page)
    assert icon.startswith("data:image/svg+xml,")


@pytest.mark.parametrize(
    ("path", "page"),
    [
        ("/ui/", "/ui"),
        ("/ui/jobs", "/ui"),
        ("/ui/jobs/", "/ui"),
        ("/ui/?status=FAILED&model=taxi", "/ui?status=FAILED&model=taxi"),
        ("/ui/models/", "/ui/models"),
        ("/ui/compare/?ids=a,b", "/ui/compare?ids=a,b"),
        ("/ui/cluster/", "/ui/cluster"),
        ("/ui/jobs/abc123/", "/ui/jobs/abc123"),  # a job's page was a 404
        ("/ui/jobs/abc123/?tab=logs", "/ui/jobs/abc123?tab=logs"),
    ],
)
def test_other_spellings_of_a_page_redirect_to_it_without_a_key(keyed: str, path: str, page: str) -> None:
    answer = httpx.get(keyed + path)
    assert answer.status_code == 307 and answer.headers["location"] == page
    assert httpx.get(keyed + path, follow_redirects=True).status_code == 200


def test_the_root_redirects_to_the_console_without_a_key(keyed: str) -> None:
    """The root is a public path (app/api/auth.py) that only leads to the console's pages, themselves public."""
    answer = httpx.get(keyed + "/")
    assert answer.status_code == 307 and answer.headers["location"] == "/ui"
    assert httpx.get(keyed + "/jobs").status_code == 401  # the API behind it is not


def test_the_models_page_reads_tags_and_aliases_where_its_script_looks_and_deletes_with_the_key(
    keyed_service: Service,
) -> None:
    """What app/ui/static/models.js draws, as it asks for it (``GET /models?limit=100`` with the key): the model's
    ``tags``, and each version's ``aliases`` and ``tags``. The page is public; its delete is not (the browser test,
    tests/e2e/test_console_browser.py, checks what the page shows)."""
    url, auth = keyed_service.url, {"Authorization": f"Bearer {KEY}"}
    with transaction(keyed_service.runtime.db) as s:
        models.register_version(session=s, name="ui-tagged", framework="xgboost", owner="alice", job_id=None,
                                artifact_uri="file:///nowhere", metrics={}, params={})  # fmt: skip
    for path, body in (("tags/team", {"value": "fraud"}), ("versions/1/tags/stage", {"value": "staging"}),
                       ("aliases/champion", {"version": 1})):  # fmt: skip
        assert httpx.put(f"{url}/models/ui-tagged/{path}", json=body, headers=auth).status_code == 200, path
    listed = httpx.get(url + "/models", params={"limit": 100}, headers=auth).json()["items"]
    (model,) = [m for m in listed if m["name"] == "ui-tagged"]
    (version,) = model["versions"]
    assert model["tags"] == {"team": "fraud"}
    assert version["aliases"] == ["champion"] and version["tags"] == {"stage": "staging"}
    assert httpx.get(url + "/ui/models").status_code == 200
    assert httpx.delete(url + "/models/ui-tagged/versions/1").status_code == 401
    assert httpx.get(url + "/models/ui-tagged/versions/1", headers=auth).status_code == 200
