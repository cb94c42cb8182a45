"""The client's parsing of model references and of event streams."""

from __future__ import annotations

import pytest

from sparktrain.client import Event, ModelRef, parse_events


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("taxi", ModelRef("taxi")),
        ("taxi:3", ModelRef("taxi", version=3)),
        ("taxi-fare.v2@champion", ModelRef("taxi-fare.v2", alias="champion")),
    ],
)
def test_model_references(text: str, ref: ModelRef) -> None:
    assert ModelRef.parse(text) == ref


@pytest.mark.parametrize("text", ["", "a:b", "a@", "a:1@b", "a:1:2"])
def test_bad_model_references(text: str) -> None:
    with pytest.raises(ValueError, match="NAME"):
        ModelRef.parse(text)


def test_events_are_parsed_as_the_sse_spec_says() -> None:
    lines = [": ping", "id: 1-0-0", "event: metrics", 'data: {"points":', "data: []}", "", "", "data: {}", ""]
    assert list(parse_events(iter(lines))) == [
        Event("metrics", "1-0-0", {"points": []}),
        Event("message", "", {}),
    ]
