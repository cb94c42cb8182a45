"""Paths that would leave the data roots once Spark reads them: links inside dataset directories, and remote URIs
that climb out of their allowed prefix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.core.errors import ValidationFailed
from app.services.datasets.paths import check_output_target, output_target, resolve_uri


@pytest.fixture
def root(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    (data / "parts").mkdir(parents=True)
    (data / "parts" / "part-0.parquet").write_bytes(b"x")
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "secret.parquet").write_bytes(b"x")
    return data


def test_a_directory_with_a_link_out_is_refused(root: Path, tmp_path: Path) -> None:
    assert resolve_uri("parts", roots=[root], loc="d") == str(root / "parts")
    os.symlink(tmp_path / "private" / "secret.parquet", root / "parts" / "part-1.parquet")
    with pytest.raises(ValidationFailed, match=r"'part-1\.parquet', a link that leads outside"):
        resolve_uri("parts", roots=[root], loc="d")


def test_a_nested_directory_link_out_is_refused(root: Path, tmp_path: Path) -> None:
    (root / "parts" / "deeper").mkdir()
    os.symlink(tmp_path / "private", root / "parts" / "deeper" / "more")
    with pytest.raises(ValidationFailed, match="a link that leads outside"):
        resolve_uri("parts", roots=[root], loc="d")


def test_a_link_out_as_the_path_itself_says_so(root: Path, tmp_path: Path) -> None:
    """A link file, or a link directory on the way, answered that the path did not exist (security walkthrough)."""
    os.symlink(tmp_path / "private" / "secret.parquet", root / "leak.parquet")
    os.symlink(tmp_path / "private", root / "outlink")
    for uri in ("leak.parquet", "outlink/secret.parquet", str(root / "outlink" / "secret.parquet")):
        with pytest.raises(ValidationFailed, match="a link that leads outside the configured data roots"):
            resolve_uri(uri, roots=[root], loc="d")
    with pytest.raises(ValidationFailed, match=r"does not exist|outside the configured"):  # nothing there: as before
        resolve_uri("outlink/nothing.parquet", roots=[root], loc="d")


def test_links_inside_the_roots_and_cycles_are_fine(root: Path) -> None:
    os.symlink(root / "parts", root / "parts" / "again")  # a cycle
    os.symlink(root / "parts" / "part-0.parquet", root / "parts" / "part-2.parquet")
    assert resolve_uri("parts", roots=[root], loc="d") == str(root / "parts")


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("s3a://bucket/data/../other/x.parquet", "segments are not allowed"),
        ("s3a://bucket/data/%2e%2e/other/x.parquet", "segments are not allowed"),
        ("s3a://bucket/data/%2E%2E%2Fother/x.parquet", "segments are not allowed"),
        ("s3a://bucket/data/./x.parquet", "segments are not allowed"),
        # Hadoop's Path takes '?' and '#' as part of the path and then drops the '..' (audit, 2026-12-06): Spark
        # read http://host/secret/data.csv for http://host/public/?/../../secret/data.csv
        ("s3a://bucket/data/?/../../secret/x.parquet", "'?' and '#' are not allowed"),
        ("s3a://bucket/data/#/../../secret/x.parquet", "'?' and '#' are not allowed"),
        ("s3a://bucket/data/%3F/../../secret/x.parquet", "'?' and '#' are not allowed"),
        # Hadoop's glob expands braces into paths before it normalizes them: 'data/{x,..}' read 'data/..'
        ("s3a://bucket/data/{x,..}/secret.parquet", "'{' and '}' are not allowed"),
        ("s3a://bucket/data/%7Bx,..%7D/secret.parquet", "'{' and '}' are not allowed"),
        ("s3a://bucket/database/x.parquet", "allowed prefix"),
        ("hdfs://nn/data/x.parquet", "allowed prefix"),
    ],
)
def test_remote_uris_stay_under_their_prefix(root: Path, uri: str, words: str) -> None:
    with pytest.raises(ValidationFailed, match=words):
        resolve_uri(uri, roots=[root], remote_prefixes=["s3a://bucket/data"], loc="d")


@pytest.mark.parametrize("prefix", ["s3a://bucket/data", "s3a://bucket/data/"])
def test_remote_uris_under_their_prefix(root: Path, prefix: str) -> None:
    for uri in ("s3a://bucket/data/x.parquet", "s3a://bucket/data/a..b/x.parquet"):
        assert resolve_uri(uri, roots=[root], remote_prefixes=[prefix], loc="d") == uri


def test_an_output_path_that_is_a_link_is_refused(root: Path, tmp_path: Path) -> None:
    check_output_target("preds/new.parquet", roots=[root])
    os.symlink(tmp_path / "private" / "planted", root / "dangling")
    with pytest.raises(ValidationFailed, match="symbolic link"):
        check_output_target("dangling", roots=[root])
    with pytest.raises(ValidationFailed, match="symbolic link"):
        check_output_target(str(root / "dangling"), roots=[root])


def test_a_relative_output_path_is_read_from_the_working_directory_first(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``var/data/out`` became ``var/data/var/data/out`` (audit, 2026-12-06): a dataset's relative path is tried
    from the working directory first, and an output's now is too."""
    monkeypatch.chdir(root.parent)
    assert output_target(f"{root.name}/out", [root]) == root.parent / root.name / "out"
    assert output_target("out", [root]) == root / "out"  # the working directory is not inside a root
    assert output_target(str(tmp_path / "abs"), [root]) == tmp_path / "abs"


@pytest.mark.parametrize("name", ["{a,..}", "*", "part[1]", "what?"])
def test_a_local_path_spark_would_read_as_a_pattern_is_refused(root: Path, name: str) -> None:
    """A directory literally named ``{a,..}`` inside a root resolved inside it, and Spark then read the root's
    parent (Hadoop expands the braces, then normalizes ``..``)."""
    (root / name).mkdir()
    (root / name / "x.csv").write_text("a\n1\n")
    with pytest.raises(ValidationFailed, match="as a pattern"):
        resolve_uri(str(root / name), roots=[root], loc="d")
    assert resolve_uri(str(root), roots=[root], loc="d") == str(root)  # the root holding it stays readable


@pytest.mark.parametrize("uri", ["*.csv", "taxi/*.parquet", "part[1]/x.csv", "nothing{a,b}"])
def test_a_pattern_that_names_nothing_is_refused_as_a_pattern(root: Path, uri: str) -> None:
    """It said 'does not exist': true, but the fix is to name a file, not to look for one (bad-input walkthrough)."""
    (root / "x.csv").write_text("a\n1\n")
    with pytest.raises(ValidationFailed, match="as a pattern"):
        resolve_uri(uri, roots=[root], loc="d")
    with pytest.raises(ValidationFailed, match="as a pattern"):
        resolve_uri(str(root / uri), roots=[root], loc="d")
