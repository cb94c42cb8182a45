"""Large bodies parsed a piece at a time (app/api/json_body.py) give what one ``json.loads`` gives, and refuse what
it refuses; an array's length is read from the raw bytes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api import json_body
from app.api.json_body import Shape, parse_in_pieces

_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
_KEYS = st.text(alphabet=st.sampled_from('ab,:[]{}"\\ \n\u00e9'), max_size=6)
_VALUES = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=8) | st.dictionaries(_KEYS, inner, max_size=6), max_leaves=60
)


@settings(max_examples=400, deadline=None)
@given(value=_VALUES, ascii_only=st.booleans(), indent=st.sampled_from([None, 1]), piece=st.integers(2, 40))
def test_the_pieces_parse_as_the_whole(value: Any, ascii_only: bool, indent: int | None, piece: int) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, indent=indent).encode()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(json_body, "PIECE_BYTES", piece)
        assert parse_in_pieces(text) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    [b"[1,2,3,4,5,6,7,8,9,10,11,12,]", b"[1,2,3,4,5,6,7,8,9,10,11,12,          ]", b"[1,2,3,4,5,6,7,8,9,10 11]",
     b'{"a": [1,2,3,4,5,6,7,8,9,10,11,12,13,14], }', b'{"a" [1,2,3,4,5,6,7,8,9,10,11,12,13,14]}',
     b"[1,2,3,4,5,6,7,8,9,10,11,12,13] x", b"[1,2,3,4,5,6,7,8,9,10,11,12,13]]", b"[[1,2,3,4,5,6,7,8,9,10,11,12}]",
     b'{"a": "\\"],[", "b": [1,2,3,4,5,6,7,8,9,10,11,12,13,14' + b"]"[:0]],
)  # fmt: skip
def test_what_json_refuses_is_refused(text: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_body, "PIECE_BYTES", 8)
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        parse_in_pieces(text)


def test_an_arrays_length_is_read_before_anything_is_parsed() -> None:
    shape = Shape(b'{"model": {"name": "m,[x]"}, "instances": [[1, "]"], [2], [3]], "e": [ ], '
                  b'"dataframe_split": {"columns": ["a"], "data": [[1], [2]]}}')  # fmt: skip
    assert shape.length("instances") == 3
    assert shape.pieces == 2  # the keys "model" and "instances", nothing of the values
    assert shape.length("dataframe_split", "data") == 2
    assert shape.length("e") == 0 and shape.length("model") is None and shape.length("nothing") is None


def test_a_body_nested_deeper_than_the_pieces_go_still_parses() -> None:
    """Past a few hundred levels around a large leaf the pieces' descent hit Python's recursion limit: a 400 for a
    body ``json.loads`` reads (review, 2026-12-07). It is read in one call then, as every body was before."""
    from app.api.json_body import parse_in_pieces

    body: Any = [1.5] * 100_000
    for _ in range(900):
        body = [body]
    raw = json.dumps(body).encode()
    assert parse_in_pieces(raw) == json.loads(raw)
