"""Per-owner data spaces (``SPARKTRAIN_OWNER_ROOT``): private directories for each owner's data and predictions.

Without them, files in the data roots belong to no one: any key reads any path there (batch prediction outputs
excepted, app/services/outputs.py), and a batch prediction may be written into a directory that another key reads
as a dataset. With ``owner_root`` set, each owner has ``<owner_root>/<owner>/`` (made on first use), and the
settings a request is planned with are scoped to its caller:

- a key that is not an admin reads its own space first (a relative path is looked for there before the data roots)
  and the data roots, and writes batch predictions only into its own space (the default output goes to
  ``<space>/predictions``). Other owners' spaces are outside its roots: a path there is answered as any path
  outside the roots, whether it exists or not;
- an admin key reads its own space, the data roots and every space (``owner_root`` itself), and writes anywhere
  in them (a relative ``output_uri`` from the last data root, as without spaces).

A job is planned again when it starts in some cases (app/jobs/dispatch.py), and a tune job plans each trial as it
starts it: both use the job owner's scope (:func:`for_owner`), an admin's only when all of the owner's keys are.
"""

from __future__ import annotations

from pathlib import Path

from app.core.auth import Caller
from app.core.settings import Settings


def space(settings: Settings, owner: str) -> Path | None:
    """The owner's data space, or None without ``owner_root``. Owner names are one path segment (OWNER_PATTERN)."""
    return settings.owner_root / owner if settings.owner_root is not None else None


def for_caller(settings: Settings, caller: Caller) -> Settings:
    """The settings to plan ``caller``'s request with: its data roots and where it may write outputs."""
    return _scoped(settings, caller.owner, admin=caller.admin)


def for_owner(settings: Settings, owner: str) -> Settings:
    """The settings a job of ``owner`` is planned with when it runs. The request's key is not recorded, so the
    narrower scope wins: an admin's only when every key of the owner is an admin key (or no keys are configured).
    An admin job of an owner that also has other keys, planned again at its start, reads what those keys read."""
    keys = [k for k in settings.api_keys if k.owner == owner]
    admin = not settings.api_keys or (bool(keys) and all(k.admin for k in keys))
    return _scoped(settings, owner, admin=admin)


def _scoped(settings: Settings, owner: str, *, admin: bool) -> Settings:
    own = space(settings, owner)
    if own is None or settings.owner_root is None:
        return settings
    own.mkdir(parents=True, exist_ok=True)
    roots = [own, *settings.data_roots, *([settings.owner_root] if admin else [])]
    scoped = settings.model_copy(update={"data_roots": roots})
    # an admin writes anywhere, and a relative output_uri lands where its default output goes (var/data when that is
    # a data root, else its own space; not owner_root, which made a space of its first segment)
    scoped._output_roots = [own, settings.owner_root, *settings.data_roots] if admin else [own]
    return scoped
