"""Local copies of a remote artifact store's directories (workers/storage.py ``fetch_dir``) do not pile up: a
directory deleted from the store (a deleted model version, a checkpoint a job's retention dropped) takes this
machine's copy with it, and past ``CACHE_BYTES`` the least recently used copies are evicted, except one used lately
(it may still be being read). Every copy used to stay under the temporary directory for good. On a real
S3-compatible server (moto); the order of use is set with explicit mtimes, not waited for."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest

from workers import storage

SIZE = 100_000


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(storage, "CACHE", tmp_path / "cache")
    return tmp_path / "cache"


def _published(bucket: str, tmp_path: Path, name: str) -> str:
    local = tmp_path / f"src-{name}"
    local.mkdir()
    (local / "weights.bin").write_bytes(os.urandom(SIZE))
    return storage.publish_dir(local, f"s3://{bucket}/cache-test-{uuid.uuid4().hex[:8]}/{name}")


def _used(copy: Path, seconds_ago: float) -> None:
    os.utime(copy, (time.time() - seconds_ago, time.time() - seconds_ago))


def test_a_directory_deleted_from_the_store_leaves_no_local_copy(s3_bucket: str, tmp_path: Path, cache: Path) -> None:
    uri = _published(s3_bucket, tmp_path, "model")
    copy = storage.fetch_dir(uri)
    assert copy.is_relative_to(cache) and (copy / "weights.bin").stat().st_size == SIZE
    storage.discard_dir(uri)  # what deleting a model version does (app/services/registry_edits.py)
    assert not copy.exists() and not any(cache.iterdir()), list(cache.iterdir())
    with pytest.raises(FileNotFoundError):
        storage.fetch_dir(uri)


def test_past_the_bound_the_least_recently_used_copies_go(
    s3_bucket: str, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storage, "CACHE_BYTES", int(2.5 * SIZE), raising=False)
    first, second, third, fourth = (_published(s3_bucket, tmp_path, n) for n in ("a", "b", "c", "d"))
    a, b = storage.fetch_dir(first), storage.fetch_dir(second)
    _used(a, 7200)
    _used(b, 3600)
    assert storage.fetch_dir(first) == a  # a hit: a is now the most recently used
    _used(a, 1800)
    c = storage.fetch_dir(third)  # three copies: b, the least recently used, goes
    assert (a.exists(), b.exists(), c.exists()) == (True, False, True)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("fetch-")]  # no partial copy stays either

    monkeypatch.setattr(storage, "CACHE_BYTES", int(1.5 * SIZE), raising=False)
    _used(c, 1)  # used a second ago: it may still be being read, so it stays over the bound
    d = storage.fetch_dir(fourth)
    assert (a.exists(), c.exists(), d.exists()) == (False, True, True)
    assert storage.fetch_dir(second) == b and (b / "weights.bin").exists()  # an evicted copy is fetched again
