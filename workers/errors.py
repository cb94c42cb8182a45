"""Errors shared by the pure spec modules (importable by the API without torch, xgboost or pyspark)."""

from __future__ import annotations

from typing import Any


class SpecError(ValueError):
    """A request field that cannot work; ``path`` locates it (``params.grid.maxDepth``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.message))
