"""The heap keeper freezes the oldest generation once it has grown by ``grow_by`` objects, at most ``max_freezes``
times, so that the collector's full passes no longer walk the libraries a driver's jobs import."""

from __future__ import annotations

import gc
import sys
import threading
import time
from collections.abc import Iterator

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


def test_counting_the_oldest_generation_never_breaks_a_tuple_another_thread_is_building() -> None:
    """``tuple(generator)`` raised ``SystemError: bad argument to internal function`` in CI while a driver's keeper
    counted the oldest generation with ``len(gc.get_objects(generation=2))``: the list it held referenced the tuple
    being built in another thread. This builds such tuples, moved to the oldest generation mid-build, while the
    keeper's check runs in a loop beside; before the fix it failed within a second, every try."""
    keeper = HeapKeeper(grow_by=10**9)  # counts, never freezes
    stop = threading.Event()

    def check_in_a_loop() -> None:
        while not stop.is_set():
            keeper.check()

    def built_with_collections() -> Iterator[int]:
        for i in range(40):
            if i in (5, 25):
                gc.collect()  # the tuple being built survives the pass: it is in the oldest generation now
                time.sleep(0)  # and another thread may run
            yield i

    kept = [[i] for i in range(50_000)]  # an oldest generation worth counting
    gc.collect()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often
    checker = threading.Thread(target=check_in_a_loop, daemon=True)
    checker.start()
    try:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert tuple(built_with_collections()) == tuple(range(40))
    finally:
        stop.set()
        checker.join()
        sys.setswitchinterval(switch)
    assert len(kept) == 50_000 and keeper.freezes == 0
