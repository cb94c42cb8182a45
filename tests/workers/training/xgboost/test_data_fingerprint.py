"""The fingerprint of the data a checkpoint's validation rows came from (workers/training/xgboost/checkpoints.py
``data_fingerprint``): a file or a directory of files as Spark reads it, told from the file system alone; a
rewritten part changes it, what Spark skips (``_SUCCESS``, ``.crc`` files) does not."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from workers.training.xgboost.checkpoints import data_fingerprint


def test_a_file_rewritten_in_place_with_the_same_size_is_told_by_its_modification_time(tmp_path: Path) -> None:
    path = tmp_path / "check.csv"
    path.write_text("x,y\n1.0000,2.0000\n")
    before = data_fingerprint(str(path))
    assert before is not None and before["files"] == 1 and before["bytes"] == path.stat().st_size
    assert data_fingerprint(path.as_uri()) == before  # a file: URI is the same file
    assert data_fingerprint(str(path)) == before  # nothing changed: the same fingerprint

    stat = path.stat()
    path.write_text("x,y\n3.0000,4.0000\n")  # other rows, the same bytes
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    after = data_fingerprint(str(path))
    assert after is not None and after["bytes"] == before["bytes"] and after != before


def test_a_directory_counts_the_files_spark_reads(tmp_path: Path) -> None:
    data = tmp_path / "check.parquet"
    (data / "day=1").mkdir(parents=True)
    (data / "day=1" / "part-0.parquet").write_bytes(b"a" * 10)
    (data / "part-1.parquet").write_bytes(b"b" * 5)
    before = data_fingerprint(str(data))
    assert before is not None and (before["files"], before["bytes"]) == (2, 15)

    (data / "_SUCCESS").write_bytes(b"")
    (data / ".part-1.parquet.crc").write_bytes(b"crc")
    (data / "_temporary").mkdir()
    (data / "_temporary" / "part-9.parquet").write_bytes(b"c" * 7)
    assert data_fingerprint(str(data)) == before  # what Spark's readers skip

    (data / "day=1" / "part-0.parquet").write_bytes(b"d" * 11)
    after = data_fingerprint(str(data))
    assert after is not None and (after["files"], after["bytes"]) == (2, 16)


def test_data_that_is_not_there_has_no_fingerprint(tmp_path: Path) -> None:
    assert data_fingerprint(str(tmp_path / "gone.csv")) is None


def test_data_on_a_store_is_listed_there(s3_bucket: str, tmp_path: Path) -> None:
    """On a real S3-compatible server (moto): a store's modification times may be whole seconds, so the rewrite
    here changes the size too."""
    from workers import storage

    local = tmp_path / "check.parquet"
    local.mkdir()
    (local / "part-0.parquet").write_bytes(b"a" * 10)
    (local / "_SUCCESS").write_bytes(b"")
    uri = storage.publish_dir(local, f"s3://{s3_bucket}/fingerprint-{uuid.uuid4().hex[:8]}/check.parquet")
    before = data_fingerprint(uri)
    assert before is not None and (before["files"], before["bytes"]) == (1, 10)
    one = data_fingerprint(f"{uri}/part-0.parquet")
    assert one is not None and (one["files"], one["bytes"]) == (1, 10)

    (local / "part-0.parquet").write_bytes(b"b" * 12)
    storage.publish_dir(local, uri)
    after = data_fingerprint(uri)
    assert after is not None and (after["files"], after["bytes"]) == (1, 12) and after != before
    assert data_fingerprint(f"s3://{s3_bucket}/fingerprint-gone/check.csv") is None
