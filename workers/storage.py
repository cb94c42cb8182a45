"""One storage interface over a URI for model and checkpoint directories: a local directory, or an object store
/ HDFS through pyarrow's filesystems (``s3://bucket/prefix``, ``hdfs://namenode/path``, ``gs://...``).

Trainers write their files locally first (fast, atomic renames) and publish them to the store; loaders fetch a
remote directory once into a local cache. Credentials come from the environment the way pyarrow reads them
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL`` for S3-compatible servers, ...), on the
driver and on the executors alike; no secret travels in a job's configuration.

Executor-side safe: stdlib and pyarrow only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlparse

LOCAL_SCHEMES = ("", "file")
CACHE = Path(tempfile.gettempdir()) / "sparktrain-artifacts"


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
    """Copy a local directory to ``uri`` (replacing what is there); returns the URI to register."""
    if not is_remote(uri):
        target = local_path(uri)
        if target.resolve() != local.resolve():
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(local, target)
        return str(target)
    from pyarrow import fs

    filesystem, path = _fs(uri)
    filesystem.delete_dir_contents(path, missing_dir_ok=True)
    fs.copy_files(str(local), path, source_filesystem=fs.LocalFileSystem(), destination_filesystem=filesystem)
    return uri


def fetch_dir(uri: str) -> Path:
    """A local directory with the files at ``uri``: the directory itself when local, else a cached copy (fetched
    once per process and URI; a directory on a store is written once and never changed in place)."""
    if not is_remote(uri):
        return local_path(uri)
    target = CACHE / hashlib.sha256(uri.encode()).hexdigest()[:24]
    if target.exists():
        return target
    from pyarrow import fs

    filesystem, path = _fs(uri)
    if filesystem.get_file_info(path).type == fs.FileType.NotFound:
        raise FileNotFoundError(f"nothing at {uri}")
    partial = Path(tempfile.mkdtemp(dir=CACHE.parent if CACHE.parent.exists() else None, prefix="fetch-"))
    fs.copy_files(path, str(partial), source_filesystem=filesystem, destination_filesystem=fs.LocalFileSystem())
    CACHE.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(partial, target)
    except OSError:  # another task fetched it first
        shutil.rmtree(partial, ignore_errors=True)
    return target


def remove_dir(uri: str) -> None:
    if not is_remote(uri):
        shutil.rmtree(local_path(uri), ignore_errors=True)
        return
    filesystem, path = _fs(uri)
    filesystem.delete_dir(path)
