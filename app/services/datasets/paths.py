"""Where a dataset URI may point: absolute paths inside the configured data roots (links followed, also inside a
dataset directory), allowed remote prefixes, and new output paths; the format from the name."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse

from app.core.errors import ValidationFailed
from app.schemas import reader_options

Format = Literal["parquet", "csv", "json"]
_EXTENSIONS: dict[str, Format] = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
}
PACKED = (".gz", ".bz2", ".zst", ".lz4", ".snappy", ".deflate", ".xz", ".zip")
"""Suffixes of compressed files: the driver does not read them itself (Spark unpacks those of its codecs)."""
_CODECS = (".gz", ".bz2", ".zst", ".lz4", ".snappy", ".deflate")
"""Compressed suffixes Spark unpacks by the name (Hadoop's codecs): ``rows.csv.gz`` is CSV."""


def compressed(files: Sequence[Path], options: dict[str, str]) -> bool:
    """Whether local text data is compressed: a file's suffix says so, or the options name a codec."""
    named = {k.lower(): v for k, v in options.items()}
    return named.get("compression", "none").lower() not in ("", "none", "uncompressed") or any(
        f.suffix.lower() in PACKED for f in files
    )


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def missing(uri: str, roots: Sequence[Path], loc: str) -> ValidationFailed:
    """The 422 of a dataset that is not there (also what another owner's dataset id answers)."""
    roots_text = ", ".join(str(r) for r in roots)
    if _DATASET_ID.fullmatch(uri):  # a registration's id: one that names none of the key's datasets, or no file
        return ValidationFailed.at(loc, f"{uri!r} is neither one of your registered datasets' ids (GET /datasets "
                                   f"lists them) nor a file in the data roots ({roots_text})")  # fmt: skip
    return ValidationFailed.at(loc, f"{uri!r} does not exist in the data roots ({roots_text})")


_DATASET_ID = re.compile(r"[0-9a-f]{32}")


_DOT_SEGMENT = re.compile(r"(^|/)\.{1,2}(/|$)")


def _remote(uri: str, scheme: str, remote_prefixes: Sequence[str], loc: str) -> str:
    """A remote URI under an allowed prefix. The prefix must end at a path boundary, and no '.' or '..' segment
    (also percent-encoded) may climb out of it: Hadoop normalizes them away before it reads. Hadoop's Path reads
    '?' and '#' as part of the path, so '.../public/?/../../secret' climbed out past a check of the URL's path
    alone: neither is allowed, and the segments are looked for in everything after the scheme."""
    decoded = unquote(uri)
    if "?" in decoded or "#" in decoded:
        raise ValidationFailed.at(loc, f"{uri[:200]!r}: '?' and '#' are not allowed in remote URIs")
    if "{" in decoded or "}" in decoded:  # 'prefix/{a,..}' expands to 'prefix/..', past the check below
        raise ValidationFailed.at(loc, f"{uri[:200]!r}: '{{' and '}}' are not allowed in remote URIs (Hadoop "
                                  "expands them into several paths)")  # fmt: skip
    if _DOT_SEGMENT.search(decoded.partition("://")[2] or decoded) or "\x00" in decoded:
        raise ValidationFailed.at(loc, f"{uri[:200]!r}: '.' and '..' segments are not allowed in remote URIs")
    for prefix in remote_prefixes:
        if uri.startswith(prefix) and (prefix.endswith("/") or uri[len(prefix) : len(prefix) + 1] in ("", "/")):
            return uri
    allowed = ", ".join(remote_prefixes) or "none are configured (SPARKTRAIN_REMOTE_URI_PREFIXES)"
    raise ValidationFailed.at(loc, f"{scheme}:// URIs must start with an allowed prefix; {allowed}")


_PATTERN = frozenset("*?[]{}\\")


def check_literal(path: str, given: str, loc: str) -> None:
    """A local path Spark is given must hold no glob characters: Hadoop reads them as a pattern, so a directory named
    ``{a,..}`` (a batch prediction's ``output_uri`` can make one) would read its parent's parent, and one named
    ``*`` every directory beside it."""
    if _PATTERN.intersection(path):
        raise ValidationFailed.at(loc, f"{given[:200]!r}: Spark reads * ? [ ] {{ }} and \\ in a local path as a "
                                  "pattern; name a path without them")  # fmt: skip


MAX_ENTRIES = 100_000
"""Files a dataset directory may hold; each one is checked to stay inside the data roots."""


def _check_tree(path: Path, roots: Sequence[Path], uri: str, loc: str) -> list[Path]:
    """Every file and directory below a dataset directory must resolve inside a data root: Spark follows links, so
    one link in a parquet directory would otherwise read a file from anywhere. An entry is checked before the walk
    goes into it (a link to /sys is refused, not walked). Returns where the links lead (resolved, each once)."""
    seen: set[str] = set()
    links: dict[str, Path] = {}
    count = 0
    for top, dirs, files in os.walk(path, followlinks=True):
        real_top = os.path.realpath(top)
        if real_top in seen:  # a link back up the tree
            dirs[:] = []
            continue
        seen.add(real_top)
        for name in (*dirs, *files):
            count += 1
            if count > MAX_ENTRIES:
                raise ValidationFailed.at(loc, f"{uri!r} holds more than {MAX_ENTRIES} files; split the dataset")
            joined = os.path.join(top, name)
            real = Path(os.path.realpath(joined))
            if not any(_inside(real, root) for root in roots):
                inner = os.path.relpath(joined, path)
                raise ValidationFailed.at(
                    loc, f"{uri!r} holds {inner!r}, a link that leads outside the configured data roots"
                )
            if os.path.islink(joined):
                links.setdefault(str(real), real)
    return list(links.values())


def links_below(path: Path, roots: Sequence[Path], uri: str, loc: str) -> list[Path]:
    """Where the links below a local dataset directory lead: Spark reads through them, so what they lead to is read
    as part of the dataset (the walk and its 422s are :func:`_check_tree`'s)."""
    return _check_tree(path, roots, uri, loc) if path.is_dir() else []


def resolve_uri(
    uri: str, *, roots: Sequence[Path], remote_prefixes: Sequence[str] = (), loc: str, walk: bool = True
) -> str:
    """Turn a request's dataset URI into an absolute path inside a data root (symlinks followed, also those inside a
    dataset directory unless ``walk`` is False), or an allowed remote URI. Relative paths are tried against the
    working directory and each root."""
    parsed = urlparse(uri)
    if parsed.scheme and parsed.scheme != "file" and len(parsed.scheme) > 1:
        return _remote(uri, parsed.scheme, remote_prefixes, loc)
    raw = unquote(parsed.path) if parsed.scheme == "file" else uri
    if "\x00" in raw:
        raise ValidationFailed.at(loc, "the path contains a NUL byte")
    given = Path(raw)
    candidates = [given] if given.is_absolute() else [Path.cwd() / given]
    if not given.is_absolute():
        for root in roots:
            candidates.append(root / given)
            if given.parts and given.parts[0] == root.name:
                candidates.append(root.parent / given)
    inside_any = False
    for candidate in candidates:
        real = Path(os.path.realpath(candidate))
        if not any(_inside(real, root) for root in roots):
            named = Path(os.path.normpath(candidate))  # in a root as written, and there: a link on its way out
            if os.path.lexists(named) and any(_inside(named, root) for root in roots):
                raise ValidationFailed.at(loc, f"{uri!r} is, or lies below, a link that leads outside the configured "
                                          "data roots")  # fmt: skip
            continue
        inside_any = True
        check_literal(str(real), uri, loc)  # whether it exists or not: a pattern is never a dataset's name
        try:
            if real.exists():
                if walk and real.is_dir():
                    _check_tree(real, roots, uri, loc)
                return str(real)
        except OSError as exc:  # a name longer than the file system allows (ENAMETOOLONG), ...
            raise ValidationFailed.at(loc, f"{uri[:200]!r} is not a usable path: {exc.strerror}") from exc
    if not inside_any:
        roots_text = ", ".join(str(r) for r in roots)
        raise ValidationFailed.at(
            loc,
            f"{uri!r} lies outside the configured data roots ({roots_text}): copy the data into one of them and give"
            f' its path relative to that root (for {roots[-1]}/fares.csv, "uri": "fares.csv"), or have the'
            " service started with SPARKTRAIN_DATA_ROOTS naming its directory",
        )
    raise missing(uri, roots, loc)


def output_target(given: str, roots: Sequence[Path], home: Path | None = None) -> Path:
    """Where a batch prediction's ``output_uri`` points: an absolute path as it is; a relative one from the working
    directory when that lands inside a data root (as a dataset's relative path is read first), else from ``home``
    (the root the default output goes to), or the last root. ``var/data/out`` was ``var/data/var/data/out``."""
    target = Path(given)
    if target.is_absolute():
        return target
    here = Path.cwd() / target
    if any(_inside(Path(os.path.realpath(here.parent)), root) for root in roots):
        return here
    return (home or roots[-1]) / target


def check_output_target(
    given: str, *, roots: Sequence[Path], home: Path | None = None, loc: str = "output_uri"
) -> None:
    """A batch prediction's new output path must not be a symbolic link: a dangling one inside a root would have
    Spark write wherever it points. (The rest of the path's checks: :func:`output_path`.)"""
    if "\x00" in given or not roots:
        return
    target = output_target(given, roots, home)
    try:
        link = target.is_symlink()
    except OSError:
        return
    if link:
        raise ValidationFailed.at(loc, f"{given[:200]!r} is a symbolic link; name a new path inside the data roots")


def detect_format(path: str, given: Format | None, *, loc: str) -> Format:
    if given is not None:
        return given
    named = Path(urlparse(path).path)
    suffix = named.suffix.lower()
    if suffix in _CODECS and Path(named.stem).suffix.lower() in (".csv", ".json", ".jsonl", ".ndjson"):
        suffix = Path(named.stem).suffix.lower()  # rows.csv.gz: CSV that Spark unpacks
    if suffix in _EXTENSIONS:
        return _EXTENSIONS[suffix]
    if suffix == "" or Path(path).is_dir():
        return "parquet"
    raise ValidationFailed.at(
        loc, f"cannot tell the format of {path!r} from its name; set format to parquet, csv or json"
    )


def check_options(fmt: str, options: dict[str, str], *, loc: str) -> dict[str, str]:
    """``options`` when every one is a reader option of ``fmt`` (app/schemas/reader_options.py: Spark copies
    options into the Hadoop configuration it reads with); else a 422 at ``loc``. Checked once the format is known,
    over a registered dataset's stored options too (a row stored before the allow-list is refused here)."""
    wrong = reader_options.problem(fmt, options)
    if wrong:
        raise ValidationFailed.at(loc, wrong)
    return options
