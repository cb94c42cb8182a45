"""The service's OpenAPI document, for the tests that check it (test_openapi_problems.py, test_openapi_clients.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import Service


@pytest.fixture(scope="module")
def document(service: Service) -> dict[str, Any]:
    answer = service.client.get("/openapi.json")
    assert answer.status_code == 200
    return dict(answer.json())
