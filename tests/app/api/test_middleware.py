"""The request guard's JSON nesting measure agrees with a parser's on any JSON text."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.middleware import MAX_JSON_DEPTH, json_depth

_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
_VALUES = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3), max_leaves=40
)


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


def _wrapped(value: Any, levels: int) -> Any:
    for i in range(levels):
        value = [value] if i % 2 else {'k[{"\\': value, "s": ']]}}\\"[['}
    return value


@settings(max_examples=300, deadline=None)
@given(value=_VALUES, levels=st.integers(0, 80), ascii_only=st.booleans())
def test_depth_matches_the_parser(value: Any, levels: int, ascii_only: bool) -> None:
    value = _wrapped(value, levels)
    text = json.dumps(value, ensure_ascii=ascii_only).encode()
    measured = json_depth(text)
    expected = _depth(value)
    if text.count(b"[") + text.count(b"{") <= MAX_JSON_DEPTH:
        assert measured == 0  # cannot pass the limit: not measured
    else:
        assert measured == expected


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"a": "[" * 500, "b": '\\"' + "{" * 500, "c": [[1]]}).encode()
    assert json_depth(text) == 3


def test_a_hundred_thousand_levels() -> None:
    assert json_depth(b"[" * 100_000 + b"]" * 100_000) == 100_000
