"""Local copies of a remote artifact store's directories (workers/storage.py ``fetch_dir``) do not pile up: a
directory deleted from the store (a deleted model version, a checkpoint a job's retention dropped) takes this
machine's copy with it, and past ``CACHE_BYTES`` the least recently used copies are evicted, except one used lately
(it may still be being read). Every copy used to stay under the temporary directory for good. An eviction never
removes a copy that a fetch (in any process) has just handed out, and a killed process's partial copies and
half-deleted copies are cleared. On a real S3-compatible server (moto); the order of use is set with explicit
mtimes, not waited for, and a concurrent fetch runs at the exact moment through a hook."""

from __future__ import annotations

import os
import subprocess
import sys
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
    assert not copy.exists() and [p.name for p in cache.iterdir()] == [".lock"]  # (the cache's lock file)
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
    assert not [p for p in tmp_path.iterdir() if "fetch-" in p.name]  # no partial copy stays either
    assert not [p for p in cache.iterdir() if "fetch-" in p.name or ".old-" in p.name]

    monkeypatch.setattr(storage, "CACHE_BYTES", int(1.5 * SIZE), raising=False)
    _used(c, 1)  # used a second ago: it may still be being read, so it stays over the bound
    d = storage.fetch_dir(fourth)
    assert (a.exists(), c.exists(), d.exists()) == (False, True, True)
    assert storage.fetch_dir(second) == b and (b / "weights.bin").exists()  # an evicted copy is fetched again


def test_a_copy_a_fetch_hands_out_while_an_eviction_runs_stays(
    s3_bucket: str, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The eviction lists the copies' last uses, then sizes them (slow); a fetch in another process that hits the
    cache in between got its path back and then read a copy the eviction removed anyway (FileNotFoundError)."""
    first, second = _published(s3_bucket, tmp_path, "a"), _published(s3_bucket, tmp_path, "b")
    a, b = storage.fetch_dir(first), storage.fetch_dir(second)
    _used(a, 7200)
    _used(b, 3600)
    handed_out: list[Path] = []
    size = storage.tree_bytes

    def sized_while_a_fetch_hits(root: Path) -> int:
        if root == a and not handed_out:  # a's old last use is read; another process now loads model a
            handed_out.append(storage.fetch_dir(first))
        return size(root)

    monkeypatch.setattr(storage, "tree_bytes", sized_while_a_fetch_hits)
    removed = storage.evict_cache(limit=SIZE)
    assert handed_out == [a] and (a / "weights.bin").stat().st_size == SIZE
    assert removed == [b] and not b.exists()  # the bound still holds: the next least recently used went


PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
try:
    fcntl.flock(fd, (fcntl.LOCK_EX if sys.argv[2] == "exclusive" else fcntl.LOCK_SH) | fcntl.LOCK_NB)
    print("free")
except BlockingIOError:
    print("blocked")
"""


def _probe(cache: Path, mode: str) -> str:
    """Whether another process could take the cache's lock ``mode`` (without waiting) right now."""
    probe = [sys.executable, "-c", PROBE, str(cache / ".lock"), mode]
    return subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")
def test_a_hit_and_an_eviction_exclude_each_other_across_processes(
    s3_bucket: str, tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hit checks and marks its copy holding the cache's lock shared; an eviction re-reads a copy's last use and
    renames it aside holding it exclusively: another process can do neither meanwhile (flock, a lock per open)."""
    first, second = _published(s3_bucket, tmp_path, "a"), _published(s3_bucket, tmp_path, "b")
    a, b = storage.fetch_dir(first), storage.fetch_dir(second)
    seen: dict[str, tuple[str, str]] = {}
    touch, aside = storage._touch, getattr(storage, "_aside", None)

    def touch_probed(path: Path) -> None:
        seen.setdefault("hit", (_probe(cache, "exclusive"), _probe(cache, "shared")))
        touch(path)

    def aside_probed(path: Path) -> Path | None:
        seen.setdefault("evict", (_probe(cache, "exclusive"), _probe(cache, "shared")))
        assert aside is not None
        return aside(path)  # type: ignore[no-any-return]

    monkeypatch.setattr(storage, "_touch", touch_probed)
    assert storage.fetch_dir(first) == a
    assert seen.pop("hit") == ("blocked", "free")  # shared: other hits go on, an eviction waits
    monkeypatch.setattr(storage, "_touch", touch)
    monkeypatch.setattr(storage, "_aside", aside_probed, raising=False)
    _used(a, 7200)
    _used(b, 3600)
    assert storage.evict_cache(limit=SIZE) == [a] and b.exists()
    assert seen == {"evict": ("blocked", "blocked")}
    assert (_probe(cache, "exclusive"), _probe(cache, "shared")) == ("free", "free")  # none held after


def _leftover(cache: Path, name: str, seconds_ago: float, *, writing: bool = False) -> Path:
    """A partial copy (``.fetch-*``) or a copy renamed aside to be deleted (``*.old-*``), last changed
    ``seconds_ago``; ``writing``: a file deep inside is being written now (a long copy's top level is older)."""
    entry = cache / name
    (entry / "stages").mkdir(parents=True)
    (entry / "stages" / "weights.bin").write_bytes(os.urandom(SIZE))
    for path in (entry / "stages" / "weights.bin", entry / "stages", entry):
        _used(path, seconds_ago)
    if writing:
        with (entry / "stages" / "weights.bin").open("ab") as out:
            out.write(b"more")
    return entry


def test_a_killed_processs_partial_and_half_deleted_copies_are_cleared(cache: Path) -> None:
    """Partial copies used to be written next to the cache and half-deleted copies renamed aside in it; a process
    killed in the middle left them for good, uncounted. Now both are in the cache: those unchanged for longer than
    CACHE_IN_USE_S go, newer ones (a fetch or a delete in progress) stay and count toward the bound."""
    copy = cache / ("c" * 24)
    copy.mkdir(parents=True)
    (copy / "weights.bin").write_bytes(os.urandom(SIZE))
    _used(copy, 7200)
    stale_fetch = _leftover(cache, ".fetch-stale1", 3600)
    stale_old = _leftover(cache, "a" * 24 + ".old-0123abcd", 3600)
    copying = _leftover(cache, ".fetch-copying", 3600, writing=True)
    deleting = _leftover(cache, "b" * 24 + ".old-4567cdef", 1)
    assert storage.evict_cache(limit=int(2.5 * SIZE)) == [copy]  # the copy + two leftovers in progress > bound
    assert sorted(p.name for p in cache.iterdir() if p.name != ".lock") == sorted([copying.name, deleting.name])
    assert not stale_fetch.exists() and not stale_old.exists()


KILLED_MID_FETCH = """
import os, sys
from pathlib import Path
from pyarrow import fs
from workers import storage

storage.CACHE, copy = Path(sys.argv[1]), fs.copy_files

def copied_then_killed(*args, **kwargs):
    copy(*args, **kwargs)
    os._exit(9)  # killed before the copy is renamed into place

fs.copy_files = copied_then_killed
storage.fetch_dir(sys.argv[2])
"""


def test_a_fetch_killed_mid_copy_leaves_its_partial_copy_to_eviction(
    s3_bucket: str, tmp_path: Path, cache: Path
) -> None:
    uri = _published(s3_bucket, tmp_path, "model")
    root = Path(storage.__file__).parent.parent
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_FETCH, str(cache), uri], cwd=root, check=False)
    assert killed.returncode == 9
    assert not [p for p in tmp_path.iterdir() if "fetch-" in p.name]  # not next to the cache, out of its reach
    (partial,) = [p for p in cache.iterdir() if p.name.startswith(".fetch-")]
    assert storage.evict_cache() == [] and partial.exists()  # just written: maybe a fetch in progress
    for path in [*partial.rglob("*"), partial]:
        _used(path, 3600)
    storage.evict_cache()
    assert not partial.exists()
    assert (storage.fetch_dir(uri) / "weights.bin").stat().st_size == SIZE


def test_a_cache_others_can_write_to_is_never_read(s3_bucket: str, tmp_path: Path, cache: Path) -> None:
    """The cache lived at one name in the shared temporary directory: a directory of that name made by another user
    (or one open to others' writes) would let them put the files of any model or checkpoint a job loads. It is one
    per user now, made private, and a cache that is not is refused rather than read."""
    uri = _published(s3_bucket, tmp_path, "model")
    copy = storage.fetch_dir(uri)
    assert cache.stat().st_mode & 0o777 == 0o700, oct(cache.stat().st_mode)
    os.chmod(cache, 0o777)  # as a directory another user made would be to us, or one any user may write to
    (copy / "weights.bin").write_bytes(b"planted")
    with pytest.raises(storage.StorageError, match="not a directory of this user's that others cannot write to"):
        storage.fetch_dir(uri)
    os.chmod(cache, 0o700)
    assert (storage.fetch_dir(uri) / "weights.bin").read_bytes() == b"planted"  # (ours again: read as it is)


def test_the_default_cache_is_one_per_user() -> None:
    assert storage.CACHE.name == f"sparktrain-artifacts-{os.getuid()}"
