"""How the C codec loops are built and found (workers/codecs/native.py); that they give numpy's results bit for
bit is tested with every codec test in test_threshold.py (the "native" path)."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.codecs import native


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A process that has not loaded the library yet, with a cache directory of its own."""
    monkeypatch.setattr(native, "_state", native._State())
    monkeypatch.setenv("SPARKTRAIN_NATIVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPARKTRAIN_NATIVE_CODEC", raising=False)
    yield tmp_path / "cache"


def test_built_once_readable_by_everyone_and_reused(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert native.library() is not None and native.engine() == "c"
    [built] = fresh.glob("threshold-*.so")
    assert stat.S_IMODE(built.stat().st_mode) == 0o755  # an image's runtime user loads what root built
    assert not list(fresh.glob(".threshold-*"))  # no private build left behind
    first = built.stat().st_mtime_ns
    monkeypatch.setattr(native, "_state", native._State())
    monkeypatch.setenv("CC", "/bin/false")  # a second process: found, not built again
    assert native.library() is not None
    assert built.stat().st_mtime_ns == first


def test_switched_off(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKTRAIN_NATIVE_CODEC", "0")
    assert native.library() is None
    assert native.engine() == "numpy (switched off (SPARKTRAIN_NATIVE_CODEC=0))"
    assert not fresh.exists()


def test_a_compiler_that_fails_leaves_numpy_with_the_reason(fresh: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/bin/false")
    assert native.library() is None
    assert native.engine().startswith("numpy (RuntimeError: /bin/false failed")
    assert not list(fresh.glob("*"))  # nothing half-built is left to be loaded later
