"""Swagger UI and ReDoc are served by the service itself: their pages name no URL outside the service, and every
asset they name answers 200, with API keys configured and without a key (the pages must load before "Authorize")."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlparse

import httpx
import pytest

from tests.helpers import running_service

_REFERENCE = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url:\s*['"]([^'"]+)['"]|["'](https?://[^"']+)["']""")


@pytest.fixture(scope="module")
def keyed(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base: Path = tmp_path_factory.mktemp("docs")
    with running_service(spark, base, api_keys="alice-0123456789abcdef:alice") as svc:
        yield svc.url


def _references(html: str) -> list[str]:
    return [next(g for g in match.groups() if g) for match in _REFERENCE.finditer(html)]


@pytest.mark.parametrize(("page", "title"), [("/docs", "Swagger UI"), ("/redoc", "ReDoc")])
def test_a_documentation_page_loads_everything_from_the_service(keyed: str, page: str, title: str) -> None:
    answer = httpx.get(keyed + page)
    assert answer.status_code == 200 and title in answer.text
    references = _references(answer.text)
    assert references, answer.text
    assets = [r for r in references if r.startswith("/docs/assets/")]
    assert len(assets) >= 2, references  # a script and a stylesheet or icon
    for reference in references:
        url = urlparse(urljoin(keyed + page, reference))
        assert f"{url.scheme}://{url.netloc}" == keyed, f"{page} names {reference}, outside the service"
        fetched = httpx.get(url.geturl())
        assert fetched.status_code == 200, f"{reference}: {fetched.status_code}"
    script = next(r for r in assets if r.endswith(".js"))
    assert len(httpx.get(keyed + script).content) > 100_000  # the real bundle, not a placeholder


def test_the_oauth2_redirect_page_is_public_and_nothing_else_under_docs_is(keyed: str) -> None:
    assert httpx.get(keyed + "/docs/oauth2-redirect").status_code == 200
    assert httpx.get(keyed + "/docs/assets/no-such-file.js").status_code == 404
    assert httpx.get(keyed + "/jobs").status_code == 401
