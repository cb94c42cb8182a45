"""Dataset URIs: resolution inside the configured data roots, format detection, schema inspection."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import unquote, urlparse

from app.core.errors import ValidationFailed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Format = Literal["parquet", "csv", "json"]
NUMERIC_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean")
_EXTENSIONS: dict[str, Format] = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
}


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def resolve_uri(uri: str, *, roots: Sequence[Path], remote_prefixes: Sequence[str] = (), loc: str) -> str:
    """Turn a request's dataset URI into an absolute path inside a data root (symlinks followed), or an allowed
    remote URI. Relative paths are tried against the working directory and each root."""
    parsed = urlparse(uri)
    if parsed.scheme and parsed.scheme != "file" and len(parsed.scheme) > 1:
        if any(uri.startswith(p) for p in remote_prefixes):
            return uri
        allowed = ", ".join(remote_prefixes) or "none are configured (SPARKTRAIN_REMOTE_URI_PREFIXES)"
        raise ValidationFailed.at(loc, f"{parsed.scheme}:// URIs must start with an allowed prefix; {allowed}")
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
            continue
        inside_any = True
        if real.exists():
            return str(real)
    roots_text = ", ".join(str(r) for r in roots)
    if not inside_any:
        raise ValidationFailed.at(loc, f"{uri!r} lies outside the configured data roots ({roots_text})")
    raise ValidationFailed.at(loc, f"{uri!r} does not exist in the data roots ({roots_text})")


def detect_format(path: str, given: Format | None, *, loc: str) -> Format:
    if given is not None:
        return given
    suffix = Path(urlparse(path).path).suffix.lower()
    if suffix in _EXTENSIONS:
        return _EXTENSIONS[suffix]
    if suffix == "" or Path(path).is_dir():
        return "parquet"
    raise ValidationFailed.at(
        loc, f"cannot tell the format of {path!r} from its name; set format to parquet, csv or json"
    )


def read_schema(spark: SparkSession, path: str, fmt: Format, options: dict[str, str], *, loc: str) -> dict[str, str]:
    """Column name -> Spark simple type name, read by Spark (parquet footers; CSV with header + inference)."""
    from workers.data.spec import ResolvedDataset, read_dataframe

    probe = ResolvedDataset(path=path, format=fmt, features=(), label=None, task=None, options=options)
    try:
        return dict(read_dataframe(spark, probe).dtypes)
    except Exception as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValidationFailed.at(loc, f"Spark cannot read {path!r} as {fmt}: {first_line[:500]}") from exc
