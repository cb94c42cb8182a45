"""Dataset URIs resolve inside the data roots only, after following links and decoding."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.core.errors import ValidationFailed
from app.services.datasets.paths import detect_format, resolve_uri


@pytest.fixture
def roots(tmp_path: Path) -> list[Path]:
    data = tmp_path / "datasets"
    (data / "taxi").mkdir(parents=True)
    (data / "taxi" / "train.parquet").write_bytes(b"x")
    other = tmp_path / "private"
    other.mkdir()
    (other / "secret.parquet").write_bytes(b"x")
    return [data]


def test_relative_paths_resolve_against_roots(
    roots: list[Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir("/")
    target = str(roots[0] / "taxi" / "train.parquet")
    assert resolve_uri("taxi/train.parquet", roots=roots, loc="d") == target
    assert resolve_uri("datasets/taxi/train.parquet", roots=roots, loc="d") == target  # the root's own name
    assert resolve_uri(target, roots=roots, loc="d") == target
    assert resolve_uri(f"file://{target}", roots=roots, loc="d") == target


@pytest.mark.parametrize(
    "uri",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "taxi/../../private/secret.parquet",
        "file:///etc/passwd",
        "file:///tmp/%2e%2e/etc/passwd",
    ],
)
def test_outside_the_roots_is_refused(roots: list[Path], uri: str) -> None:
    with pytest.raises(ValidationFailed, match="outside the configured data roots"):
        resolve_uri(uri, roots=roots, loc="dataset.uri")


def test_symlink_out_of_a_root_is_refused(roots: list[Path], tmp_path: Path) -> None:
    os.symlink(tmp_path / "private" / "secret.parquet", roots[0] / "link.parquet")
    with pytest.raises(ValidationFailed, match="outside"):
        resolve_uri("link.parquet", roots=roots, loc="d")


def test_missing_file_inside_a_root(roots: list[Path]) -> None:
    with pytest.raises(ValidationFailed, match="does not exist") as info:
        resolve_uri("taxi/nope.parquet", roots=roots, loc="dataset.uri")
    assert info.value.errors == [
        {"loc": "dataset.uri", "in": "body", "msg": info.value.errors[0]["msg"], "type": "value_error"}
    ]


@pytest.mark.parametrize("uri", ["a" * 300 + ".parquet", "taxi/" + "b" * 256, "x\x00.parquet"])
def test_unusable_paths_are_refused(roots: list[Path], uri: str) -> None:
    # A name longer than the file system allows used to escape as OSError (a 500).
    with pytest.raises(ValidationFailed, match=r"not a usable path|NUL byte"):
        resolve_uri(uri, roots=roots, loc="dataset.uri")


def test_remote_uris_need_an_allowed_prefix(roots: list[Path]) -> None:
    with pytest.raises(ValidationFailed, match="allowed prefix"):
        resolve_uri("s3a://bucket/data.parquet", roots=roots, loc="d")
    ok = resolve_uri("s3a://bucket/data.parquet", roots=roots, remote_prefixes=["s3a://bucket/"], loc="d")
    assert ok == "s3a://bucket/data.parquet"


def test_format_detection(tmp_path: Path) -> None:
    assert detect_format("/a/b.parquet", None, loc="f") == "parquet"
    assert detect_format("/a/b.CSV", None, loc="f") == "csv"
    assert detect_format("/a/b.jsonl", None, loc="f") == "json"
    assert detect_format("/a/b.ndjson", None, loc="f") == "json"
    # compressed text that Spark unpacks: the format is the name's before the codec's
    assert detect_format("/a/iris_train.csv.gz", None, loc="f") == "csv"
    assert detect_format("/a/b.CSV.bz2", None, loc="f") == "csv"
    assert detect_format("/a/b.json.gz", None, loc="f") == "json"
    assert detect_format("/a/b.ndjson.zst", None, loc="f") == "json"
    for name in ("/a/b.gz", "/a/b.parquet.gz", "/a/b.csv.zip"):  # no text format, or a codec Spark does not read
        with pytest.raises(ValidationFailed, match="cannot tell the format"):
            detect_format(name, None, loc="f")
    assert detect_format(str(tmp_path), None, loc="f") == "parquet"
    assert detect_format("/a/b.txt", "csv", loc="f") == "csv"
    with pytest.raises(ValidationFailed, match="cannot tell the format"):
        detect_format("/a/b.txt", None, loc="f")
