"""The heap keeper freezes the oldest generation once it has grown by ``grow_by`` objects, at most ``max_freezes``
times, so that the collector's full passes no longer walk the libraries a driver's jobs import."""

from __future__ import annotations

import gc

from app.core.heap import HeapKeeper


def _grow_oldest_generation(count: int) -> list[list[int]]:
    kept = [[i] for i in range(count)]  # lists are tracked by the collector (a dict of ints would not be)
    gc.collect()  # what survives a full pass lives in the oldest generation
    return kept


def test_it_freezes_when_the_oldest_generation_grew_and_stops_after_max_freezes() -> None:
    keeper = HeapKeeper(grow_by=20_000, max_freezes=2)
    keeper.freeze("the test's start")
    assert keeper.check() is False, "nothing new in the oldest generation yet"

    kept = _grow_oldest_generation(30_000)
    before = gc.get_freeze_count()
    assert keeper.check() is True
    assert gc.get_freeze_count() >= before + 30_000
    assert len(gc.get_objects(generation=2)) < 20_000, "a full pass no longer walks them"
    assert keeper.freezes == 2

    more = _grow_oldest_generation(30_000)
    assert keeper.check() is False, "max_freezes reached: the next growth stays in the collector's passes"
    assert len(gc.get_objects(generation=2)) >= 30_000
    assert len(kept) == len(more) == 30_000
