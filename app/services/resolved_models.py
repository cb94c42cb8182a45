"""Model selectors already resolved, per driver: an online request (``POST /predict``, V2) does not query the
database for a model it has seen. An alias or the newest version is looked up again after ``ttl_s``, at once on the
driver that moved or removed the alias; another driver sees the move within ``ttl_s``."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.schemas.inference import ModelSelector
from app.services.planning.inference import resolve_model_and_owner
from workers.inference.spec import ModelRef


class ResolvedModels:
    """Model selectors already resolved, so an online request does not query the database: a version or checkpoint
    never changes, the newest version or an alias is looked up after ``ttl_s``; a hit serves only its owner."""

    def __init__(self, ttl_s: float = 2.0, capacity: int = 256) -> None:
        self.ttl_s, self.capacity = ttl_s, capacity
        self._items: dict[tuple[Any, ...], tuple[float, ModelRef, str]] = {}

    def peek(self, key: tuple[Any, ...], *, owner: str | None = None) -> ModelRef | None:
        """The cached resolution of a selector key when it is still fresh and ``owner``'s (no database access)."""
        hit = self._items.get(key)
        if hit is None or owner not in (None, hit[2]):
            return None
        fixed = key[1] is not None or key[3] is not None
        return hit[1] if fixed or time.monotonic() - hit[0] < self.ttl_s else None

    def get(self, db: sessionmaker[Session], selector: ModelSelector, *, owner: str | None = None) -> ModelRef:
        """As :func:`resolve_model`: ``owner`` (None: any) sees only its own models and checkpoints."""
        key = (selector.name, selector.version, selector.alias, selector.checkpoint)
        fixed = selector.version is not None or selector.checkpoint is not None
        hit = self._items.get(key)
        now = time.monotonic()
        if hit is not None and (fixed or now - hit[0] < self.ttl_s) and owner in (None, hit[2]):
            return hit[1]
        with db() as session:
            model, model_owner = resolve_model_and_owner(session, selector, owner)
        if len(self._items) >= self.capacity:
            self._items.clear()
        self._items[key] = (now, model, model_owner)
        return model

    def forget(self, name: str) -> None:
        """Drop what a model's alias or newest version resolved to (an alias moved or removed here)."""
        for key in [k for k in list(self._items) if k[0] == name and k[1] is None and k[3] is None]:
            self._items.pop(key, None)
