"""Walking the service's OpenAPI document (the ``document`` fixture of tests/app/api/conftest.py)."""

from __future__ import annotations

from typing import Any

METHODS = {"get", "put", "post", "delete", "patch"}


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, operation) of every operation."""
    return [(m, p, op) for p, item in document["paths"].items() for m, op in item.items() if m in METHODS]
