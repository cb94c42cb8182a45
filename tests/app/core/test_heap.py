"""The heap keeper freezes the oldest generation once it has grown by ``grow_by`` objects, at most ``max_freezes``
times, so that the collector's full passes no longer walk the libraries a driver's jobs import."""

from __future__ import annotations

import gc

from app.core.heap import HeapKeeper


def _grow_oldest_generation(count: int) -> list[list[int]]:
    kept = [[i] for i in range(count)]  # lists are tracked by the collector (a dict of ints would not be)
    gc.collect()  # what survives a full pass lives in the oldest generation
    return kept


def _tracked(obj: object) -> bool:
    """Whether ``obj`` is in one of the generations the collector walks (the permanent one is not among them)."""
    return any(o is obj for o in gc.get_objects())


def test_it_freezes_when_the_oldest_generation_grew_and_stops_after_max_freezes() -> None:
    keeper = HeapKeeper(grow_by=20_000, max_freezes=2)
    keeper.freeze("the test's start")
    assert keeper.check() is False, "nothing new in the oldest generation yet"

    kept = _grow_oldest_generation(30_000)
    assert _tracked(kept[0]) and _tracked(kept[-1]), "the new lists sit in a generation the collector walks"
    assert keeper.check() is True
    # not gc.get_freeze_count(): frozen objects of earlier tests (other apps' keepers) may be freed meanwhile
    assert not _tracked(kept[0]) and not _tracked(kept[-1]), "frozen: in no generation the collector walks"
    assert len(gc.get_objects(generation=2)) < 20_000, "a full pass no longer walks them"
    assert keeper.freezes == 2

    more = _grow_oldest_generation(30_000)
    assert keeper.check() is False, "max_freezes reached: the next growth stays in the collector's passes"
    assert len(gc.get_objects(generation=2)) >= 30_000
    assert len(kept) == len(more) == 30_000
