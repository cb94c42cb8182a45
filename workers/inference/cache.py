"""A bounded cache of loaded models (pure Python: the API process holds one without importing torch)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any


class ModelCache:
    """Loaded models by artifact URI, least recently used dropped first (bounded: a long-lived driver or Python
    worker must not grow without end)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._items: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        """Lookups answered from the cache and lookups that loaded (``GET /metrics`` exports both)."""

    def get(self, key: str, load: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key]
            self.misses += 1
        value = load()
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return value

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def discard(self, *keys: str) -> None:
        """Drop these models now (their versions were deleted), not when they are least recently used."""
        with self._lock:
            for key in keys:
                self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
