"""Fixtures of the trainer's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import tmpfs


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs of the test's own, unmounted afterwards (skipped where it cannot be mounted: not root)."""
    with tmpfs(tmp_path / "small", "2m") as mount:
        yield mount
