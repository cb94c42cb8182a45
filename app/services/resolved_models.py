"""Model selectors already resolved, per driver: an online request (``POST /predict``) does not query the database
for a model it has seen. A version, an alias or the newest version is looked up again after ``ttl_s`` (2 s), and at
once on the driver that moved or removed an alias or deleted a version or the model; another driver sees the move
or the delete within ``ttl_s``. A checkpoint never changes and stays resolved.

A deleted version's loaded model leaves the driver's model cache (:class:`workers.inference.cache.ModelCache`) at
once on the driver that deleted it (:func:`unload`); another driver drops it on its next prediction after a request
for the version found it gone (``ttl_s`` after the delete at the earliest), or when the cache evicts it."""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.core.errors import NotFound
from app.schemas.inference import ModelSelector
from app.services.planning.inference import resolve_model_and_owner
from workers import storage
from workers.inference.spec import ModelRef


class ResolvedModels:
    """Model selectors already resolved, so an online request does not query the database: a checkpoint never
    changes; a version (which can be deleted), the newest version or an alias is looked up after ``ttl_s``; a hit
    serves only its owner."""

    def __init__(self, ttl_s: float = 2.0, capacity: int = 256) -> None:
        self.ttl_s, self.capacity = ttl_s, capacity
        self._items: dict[tuple[Any, ...], tuple[float, ModelRef, str]] = {}

    def _fresh(self, key: tuple[Any, ...], hit: tuple[float, ModelRef, str], now: float) -> bool:
        return key[3] is not None or now - hit[0] < self.ttl_s

    def peek(self, key: tuple[Any, ...], *, owner: str | None = None) -> ModelRef | None:
        """The cached resolution of a selector key when it is still fresh and ``owner``'s (no database access)."""
        hit = self._items.get(key)
        if hit is None or owner not in (None, hit[2]):
            return None
        return hit[1] if self._fresh(key, hit, time.monotonic()) else None

    def get(self, db: sessionmaker[Session], selector: ModelSelector, *, owner: str | None = None) -> ModelRef:
        """As :func:`resolve_model`: ``owner`` (None: any) sees only its own models and checkpoints."""
        key = (selector.name, selector.version, selector.alias, selector.checkpoint)
        hit = self._items.get(key)
        now = time.monotonic()
        if hit is not None and self._fresh(key, hit, now) and owner in (None, hit[2]):
            return hit[1]
        with db() as session:
            try:
                model, model_owner = resolve_model_and_owner(session, selector, owner)
            except Exception as exc:
                self._items.pop(key, None)  # gone (deleted) or refused: nothing stale stays behind
                if hit is not None and owner in (None, hit[2]) and isinstance(exc, NotFound) and _deleted(key):
                    _gone(hit[1].uri)  # deleted on another driver: unloaded on this one's next prediction
                raise
        if len(self._items) >= self.capacity:
            self._items.clear()
        self._items[key] = (now, model, model_owner)
        return model

    def forget(self, name: str, *, versions: bool = False) -> None:
        """Drop what a model's alias or newest version resolved to (an alias moved or removed here); with
        ``versions``, its explicit versions too (a version or the model deleted here)."""
        for key in [k for k in list(self._items) if k[0] == name and (versions or (k[1] is None and k[3] is None))]:
            self._items.pop(key, None)


_GONE: set[str] = set()
_GONE_LOCK = threading.Lock()


def _deleted(key: tuple[Any, ...]) -> bool:
    """Whether a 404 for this selector key means its version was deleted: an explicit version, or the newest of a
    model (a removed alias says nothing of its version)."""
    return key[3] is None and (key[1] is not None or key[2] is None)


def _gone(uri: str) -> None:
    with _GONE_LOCK:
        _GONE.add(uri)


def loaded(cache: Any, model: ModelRef, load: Any) -> Any:
    """``model`` from the driver's cache of loaded models (``load(uri)`` on a miss). Its files gone (deleted on
    another driver, which this one learns within ``ttl_s``) is a 404, not a 500. Models a resolution found deleted
    since the last call leave the cache first."""
    if _GONE:
        with _GONE_LOCK:
            gone = [uri for uri in _GONE if uri != model.uri]
            _GONE.difference_update(gone)
        cache.discard(*gone)
    try:
        return cache.get(model.uri, lambda: load(model.uri))
    except Exception as exc:
        local = not storage.is_remote(model.uri)
        if isinstance(exc, FileNotFoundError) or (local and not storage.local_path(model.uri).exists()):
            what = f"model {model.name!r} version {model.version}" if model.version else "this model"
            raise NotFound(f"The files of {what} are gone: it was deleted, or its artifact store lost them.") from exc
        raise
