"""One storage interface over a URI for model and checkpoint directories: a local directory, or an object store
/ HDFS through pyarrow's filesystems (``s3://bucket/prefix``, ``hdfs://namenode/path``, ``gs://...``).

Trainers write their files locally first (fast, atomic renames) and publish them to the store; loaders fetch a
remote directory into a local cache, bounded (:data:`CACHE_BYTES`, least recently used copies evicted first) and
without the copies of directories deleted from the store by this process. Credentials come from the environment the
way pyarrow reads them (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL`` for S3-compatible
servers, ...), on the driver and on the executors alike; no secret travels in a job's configuration.

Writes never leave a half-written directory under its final name: a local directory is written under a private
name, flushed and renamed into place; on an object store a directory is visible once registered, and a one-file
checkpoint is one object. A full disk or an unreachable store raises :class:`StorageError`, whose reason
(``STORAGE_FULL``, ``STORAGE_UNAVAILABLE``) becomes the job's error reason, also when it is raised on an executor.

Executor-side safe: stdlib and pyarrow only.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

if sys.platform != "win32":  # the service runs on Linux; elsewhere the cache goes without its lock
    import fcntl

T = TypeVar("T")
_FULL = {errno.ENOSPC, errno.EDQUOT}
_UNAVAILABLE = {errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.ENOTCONN, errno.ETIMEDOUT,
                errno.ECONNREFUSED, errno.EHOSTUNREACH}  # fmt: skip


class StorageError(OSError):
    """Writing to (or reading from) the artifact store failed for a reason that is not the job's: the disk is full
    (``STORAGE_FULL``) or the store cannot be reached or written (``STORAGE_UNAVAILABLE``). ``str()`` starts with
    the reason, so that it survives the trip from an executor in Spark's error text."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


@contextmanager
def guarded(what: str, uri: str) -> Iterator[None]:
    """OSErrors of a storage operation as :class:`StorageError` when they are the store's fault."""
    try:
        yield
    except StorageError:
        raise
    except OSError as exc:
        remote = is_remote(uri)
        if exc.errno in _FULL or "No space left on device" in str(exc):
            raise StorageError("STORAGE_FULL", f"{what} {uri}: the store is full ({exc})") from exc
        if exc.errno in _UNAVAILABLE or (remote and exc.errno is None and not isinstance(exc, FileNotFoundError)):
            raise StorageError("STORAGE_UNAVAILABLE", f"{what} {uri}: {exc}") from exc
        raise


LOCAL_SCHEMES = ("", "file")
CACHE = Path(tempfile.gettempdir()) / f"sparktrain-artifacts-{getattr(os, 'getuid', lambda: 0)()}"
"""Local copies of remote directories (:func:`fetch_dir`), one per URI, on the driver and on each executor: one
directory per Unix user, private to it (:func:`_own_cache`)."""
CACHE_BYTES = 4 << 30
"""Past this many bytes of copies a fetch evicts the least recently used ones (a checkpoint a finished job resumed
from, a model no longer loaded), except those used in the last :data:`CACHE_IN_USE_S` seconds."""
CACHE_IN_USE_S = 600.0
"""A copy used this recently may still be being read (a Spark model loads its files one at a time): never evicted.
A partial copy (``.fetch-*``) or a copy being deleted (``*.old-*``) left unchanged this long is a killed process's
leftover: eviction removes it."""


def is_remote(uri: str) -> bool:
    return urlparse(uri).scheme not in LOCAL_SCHEMES and len(urlparse(uri).scheme) > 1


def local_path(uri: str) -> Path:
    return Path(urlparse(uri).path) if uri.startswith("file:") else Path(uri)


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *[p.strip("/") for p in parts]])


def _fs(uri: str):  # type: ignore[no-untyped-def]
    from pyarrow import fs

    return fs.FileSystem.from_uri(uri)


def publish_dir(local: Path, uri: str) -> str:
    """Copy a local directory to ``uri`` (replacing what is there); returns the URI to register. A local copy is
    written under a private name and renamed into place."""
    with guarded("publishing to", uri):
        if not is_remote(uri):
            target = local_path(uri)
            if target.resolve() != local.resolve():
                partial = target.with_name(f"{target.name}.partial-{uuid.uuid4().hex[:8]}")
                shutil.copytree(local, partial)
                _fsync_tree(partial)
                replace_dir(partial, target)
            return str(target)
        from pyarrow import fs

        filesystem, path = _fs(uri)
        filesystem.delete_dir_contents(path, missing_dir_ok=True)
        fs.copy_files(str(local), path, source_filesystem=fs.LocalFileSystem(), destination_filesystem=filesystem)
        return uri


def publish_files(directory: str, name: str, files: Mapping[str, bytes]) -> str:
    """Write ``files`` as the directory ``<directory>/<name>`` so that it appears complete or not at all: locally
    under a private name, flushed, then renamed (an existing one is replaced); on a store one object per file (a
    one-file directory is then one atomic PUT). Returns the directory's URI."""
    uri = join(directory, name)
    with guarded("writing", uri):
        if is_remote(uri):
            filesystem, path = _fs(uri)
            for file, data in files.items():
                with filesystem.open_output_stream(f"{path}/{file}") as out:
                    out.write(data)
            return uri
        target = local_path(uri)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.partial-{uuid.uuid4().hex[:8]}")
        partial.mkdir()
        try:
            for file, data in files.items():
                with (partial / file).open("wb") as out:
                    out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
            replace_dir(partial, target)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return str(target)


def replace_dir(partial: Path, target: Path) -> None:
    """Rename a complete ``partial`` directory to ``target``; one already there is renamed aside and removed."""
    try:
        os.replace(partial, target)
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    aside = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")  # hidden from Spark's readers
    os.replace(target, aside)
    os.replace(partial, target)
    shutil.rmtree(aside, ignore_errors=True)


def discard_dir(uri: str | Path, *, ignore_errors: bool = True) -> None:
    """Delete a directory so that its name disappears at once: a local one is renamed aside (``<name>.old-<hex>``)
    and then removed, so a kill in the middle never leaves a half-deleted directory under the name; a remote
    store's delete is its own. One that is not there is nothing to do."""
    if is_remote(str(uri)):
        remove_dir(str(uri))
        return
    aside = _aside(local_path(str(uri)))
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=ignore_errors)


def _aside(path: Path) -> Path | None:
    """``path`` renamed to ``<name>.old-<hex>`` (the new name) and marked now (a cache's eviction leaves a fresh
    one to whoever is removing it), or None when it is not there."""
    aside = path.with_name(f"{path.name}.old-{uuid.uuid4().hex[:8]}")
    try:
        os.replace(path, aside)
    except FileNotFoundError:
        return None
    _touch(aside)
    return aside


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with path.open("rb") as f:
                os.fsync(f.fileno())


def list_dir(uri: str) -> list[str]:
    """The names directly under ``uri`` (nothing when it does not exist)."""
    with guarded("listing", uri):
        if not is_remote(uri):
            try:
                return sorted(os.listdir(local_path(uri)))
            except FileNotFoundError:
                return []
        from pyarrow import fs

        filesystem, path = _fs(uri)
        selector = fs.FileSelector(path, allow_not_found=True)
        return sorted(info.base_name for info in filesystem.get_file_info(selector))


def attempt(what: str, uri: str, call: Callable[[], T]) -> T:
    """``call()`` with its storage errors as :class:`StorageError`."""
    with guarded(what, uri):
        return call()


def fetch_dir(uri: str) -> Path:
    """A local directory with the files at ``uri``: the directory itself when local, else a cached copy (fetched
    once per machine and URI while it stays in the cache; a directory on a store is written once and never changed
    in place). Each use marks the copy used (its mtime), under the cache's shared lock so that no eviction (in
    any process) removes a copy between that check and that mark; a fetch that adds one evicts others past
    :data:`CACHE_BYTES`."""
    if not is_remote(uri):
        return local_path(uri)
    target = _cached(uri)
    if _hit(target):
        return target
    from pyarrow import fs

    filesystem, path = _fs(uri)
    if filesystem.get_file_info(path).type == fs.FileType.NotFound:
        raise FileNotFoundError(f"nothing at {uri}")
    _own_cache()
    partial = Path(tempfile.mkdtemp(dir=CACHE, prefix=".fetch-"))  # a kill leaves it to eviction
    try:
        fs.copy_files(path, str(partial), source_filesystem=filesystem, destination_filesystem=fs.LocalFileSystem())
        _touch(partial)  # renamed in as used now, whatever the copy's last top-level write was
        try:
            os.replace(partial, target)
        except OSError:  # another task fetched it first
            if not _hit(target):
                raise
    finally:  # a copy that failed half way (the store went away) stays nowhere
        shutil.rmtree(partial, ignore_errors=True)
    _touch(target)
    evict_cache(keep=target)
    return target


def _hit(target: Path) -> bool:
    with _cache_lock(exclusive=False):
        if not target.exists():
            return False
        _touch(target)
        return True


@contextmanager
def _cache_lock(*, exclusive: bool) -> Iterator[None]:
    """``CACHE/.lock`` (flock: across processes, and across opens in one): shared by a cache hit's check and mark,
    exclusive while an eviction checks one copy's last use and renames it aside."""
    if sys.platform == "win32":
        yield
        return
    try:
        _own_cache()
        fd = os.open(CACHE / ".lock", os.O_RDONLY | os.O_CREAT, 0o600)  # (flock needs no write access)
    except StorageError:  # another user's: never read from
        raise
    except OSError:  # an unwritable cache: nothing is fetched into it either
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # (releases the lock)


def _own_cache() -> None:
    """Make the cache (mode 0700) or check the one there: in a shared temporary directory, a directory of that name
    made by another user (or one others may write to) would let them put the files of any model or checkpoint this
    process loads. A :class:`StorageError` then (STORAGE_UNAVAILABLE), never a load from it."""
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    with suppress(FileExistsError):
        CACHE.mkdir(mode=0o700)
    found = CACHE.lstat()
    if sys.platform == "win32":  # (no owners or modes as POSIX has them: every directory reads 0o777)
        return
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o022:
        why = "is not a directory of this user's that others cannot write to: remove it (made again, private)"
        raise StorageError("STORAGE_UNAVAILABLE", f"the local cache of the artifact store, {CACHE}, {why}")


def _cached(uri: str) -> Path:
    return CACHE / hashlib.sha256(uri.encode()).hexdigest()[:24]


def _touch(path: Path) -> None:
    with suppress(OSError):  # evicted meanwhile by another process
        os.utime(path)


def evict_cache(*, keep: Path | None = None, limit: int | None = None) -> list[Path]:
    """Remove the least recently used copies until the cache holds at most ``limit`` bytes (default
    :data:`CACHE_BYTES`); ``keep`` and copies used in the last :data:`CACHE_IN_USE_S` seconds stay. Leftovers of
    killed processes (``.fetch-*``, ``*.old-*``) unchanged that long are removed; newer ones count toward the bytes.
    Returns the copies removed."""
    limit = CACHE_BYTES if limit is None else limit
    entries, total = [], 0
    try:
        names = list(CACHE.iterdir())
    except OSError:  # no cache yet
        return []
    for entry in names:
        with suppress(OSError):  # removed meanwhile by another process
            if not entry.is_dir() or entry.is_symlink():
                continue
            used, size = entry.lstat().st_mtime, tree_bytes(entry)
            if entry.name.startswith(".fetch-") or ".old-" in entry.name:
                if _newest(entry) < time.time() - CACHE_IN_USE_S:  # unchanged, deep down too: nobody's at it
                    shutil.rmtree(entry, ignore_errors=True)
                    continue
            elif len(entry.name) == 24:
                entries.append((used, size, entry))
            total += size
    removed = []
    for used, size, entry in sorted(entries, key=lambda e: e[0]):
        if total <= limit:
            break
        if entry == keep or used > time.time() - CACHE_IN_USE_S:
            continue
        with _cache_lock(exclusive=True):  # no hit (any process) checks and marks it meanwhile
            try:  # read again: a hit since the listing marked it used
                fresh = entry.lstat().st_mtime > time.time() - CACHE_IN_USE_S
            except OSError:
                fresh = False  # removed by another process: its bytes are gone
            aside = None if fresh else _aside(entry)
        if fresh:
            continue
        total -= size
        if aside is not None:  # renamed aside under the lock; removed without it (a reader never sees half a copy)
            shutil.rmtree(aside, ignore_errors=True)
            removed.append(entry)
    return removed


def tree_bytes(root: Path) -> int:
    """The bytes of the files under ``root`` (those removed while it is walked left out)."""
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                continue
    return total


def _newest(root: Path) -> float:
    newest = root.lstat().st_mtime
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            with suppress(OSError):
                newest = max(newest, os.lstat(os.path.join(directory, name)).st_mtime)
    return newest


def remove_dir(uri: str) -> None:
    if not is_remote(uri):
        shutil.rmtree(local_path(uri), ignore_errors=True)
        return
    filesystem, path = _fs(uri)
    filesystem.delete_dir(path)
    discard_dir(_cached(uri))  # this machine's copy of it, if any: nothing will read it again
