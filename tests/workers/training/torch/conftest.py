"""Fixtures of the trainer's tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import tmpfs


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs of the test's own, unmounted afterwards (root only: skipped elsewhere)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    with tmpfs(tmp_path / "small", "2m") as mount:
        yield mount
