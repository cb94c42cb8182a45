"""Keep the driver's long-lived objects out of the garbage collector's full passes.

The driver imports pyspark, SQLAlchemy and FastAPI when it starts, and torch, xgboost, scikit-learn, scipy and
pyarrow when its first jobs need them: a few hundred thousand objects that live as long as the process. CPython's
full collection (generation 2) walks every one of them while it holds the GIL, and every request waits: measured
150 to 185 ms a pass, every few seconds under ``bench.load`` (50 users, two trainings), which made the p99 of
every route. ``gc.freeze()`` moves the objects alive at that moment to a permanent generation no pass walks.

:class:`HeapKeeper` freezes once when the app starts (after the runtime is built) and again whenever the oldest
generation has grown by ``grow_by`` objects since, which is what a job's first imports do; it looks every
``interval_s``. Frozen objects are still freed when their last reference goes; only a reference cycle among them
is never collected. Each freeze can therefore keep the cycles that were alive at that moment (a running job's
objects) for the life of the process, so the number of freezes is bounded (``max_freezes``): a few, since the
libraries are imported once.
"""

from __future__ import annotations

import gc
import logging
import threading
import time

log = logging.getLogger("sparktrain")


def _oldest_generation_size() -> int:
    """How many objects the oldest generation holds, counted without another thread ever running meanwhile.

    ``gc.get_objects`` returns a list that references every object it found; while that list lives, an object
    another thread is still building may have one reference too many. ``tuple(generator)`` resizes the tuple it is
    building and refuses to when anything else references it: ``SystemError: bad argument to internal function`` in
    a request's thread (seen in CI, under hypothesis). ``len(gc.get_objects(2))`` would leave the list alive across
    a bytecode boundary, where the interpreter may hand the GIL to another thread; called through ``map`` and
    ``sum`` the list is made, measured and freed in C, with no bytecode between (tests/app/core/test_heap.py).
    """
    return sum(map(len, map(gc.get_objects, (2,))))


class HeapKeeper:
    def __init__(self, *, interval_s: float = 5.0, grow_by: int = 50_000, max_freezes: int = 8) -> None:
        self.interval_s, self.grow_by, self.max_freezes = interval_s, grow_by, max_freezes
        self.freezes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def freeze(self, why: str) -> None:
        """Collect what is garbage now, then freeze the rest."""
        started = time.perf_counter()
        gc.collect()
        gc.freeze()
        self.freezes += 1
        log.info("froze %d long-lived objects (%s) out of the collector's full passes in %.0f ms",
                 gc.get_freeze_count(), why, 1e3 * (time.perf_counter() - started))  # fmt: skip

    def check(self) -> bool:
        """Freeze when the oldest generation has grown by ``grow_by`` objects (and freezes are left)."""
        if self.freezes >= self.max_freezes:
            return False
        grown = _oldest_generation_size()
        if grown < self.grow_by:
            return False
        self.freeze(f"{grown} new in the oldest generation")
        return True

    def start(self) -> None:
        self.freeze("the driver's start")
        self._thread = threading.Thread(target=self._run, name="heap-keeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s) and self.freezes < self.max_freezes:
            try:
                self.check()
            except Exception as exc:  # never let housekeeping take a driver down
                log.warning("the heap keeper failed: %s: %s", type(exc).__name__, exc)
