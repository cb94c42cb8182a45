"""The registry's owners on both databases: a name belongs to the owner whose job registered its first version;
lookups filtered by owner answer for another owner's model exactly as for a missing one."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.errors import Conflict, NotFound, ValidationFailed
from app.db.session import transaction
from app.services import jobs, models
from app.services.datasets import registry as datasets


def _job(db: Any, owner: str, name: str = "m") -> str:
    with transaction(db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={}, name=name, owner=owner)
        return job.id


def _register(db: Any, name: str, job_id: str | None, owner: str) -> int:
    with transaction(db) as s:
        v = models.register_version(
            session=s, name=name, framework="spark_ml", artifact_uri="file:///x", metrics={}, params={},
            job_id=job_id, owner=owner,
        )  # fmt: skip
        return v.version


def _message(call: Any) -> str:
    with pytest.raises(NotFound) as info:
        call()
    return info.value.detail


def test_lookups_hide_another_owners_model(db: Any) -> None:
    _register(db, "m", _job(db, "alice"), "alice")
    _register(db, "n", _job(db, "bob", "n"), "bob")
    with transaction(db) as s:
        models.set_alias(session=s, name="m", alias="champion", version=1, owner="alice")
    with db() as s:
        assert [m.name for m in models.page_models(session=s, owner="alice")[0]] == ["m"]
        assert [m.name for m in models.page_models(session=s)[0]] == ["m", "n"]
        assert models.get_version(session=s, name="m", version=1, owner="alice").version == 1
        assert models.resolve_version(session=s, name="m", alias="champion", owner="alice").version == 1
        for owner_call, unknown_call in [
            (
                lambda: models.get_version(session=s, name="m", version=1, owner="bob"),
                lambda: models.get_version(session=s, name="x", version=1, owner="bob"),
            ),
            (
                lambda: models.resolve_version(session=s, name="m", owner="bob"),
                lambda: models.resolve_version(session=s, name="x", owner="bob"),
            ),
            (
                lambda: models.resolve_version(session=s, name="m", alias="champion", owner="bob"),
                lambda: models.resolve_version(session=s, name="x", alias="champion", owner="bob"),
            ),
            (
                lambda: models.set_alias(session=s, name="m", alias="prod", version=1, owner="bob"),
                lambda: models.set_alias(session=s, name="x", alias="prod", version=1, owner="bob"),
            ),
            (
                lambda: models.delete_alias(session=s, name="m", alias="champion", owner="bob"),
                lambda: models.delete_alias(session=s, name="x", alias="champion", owner="bob"),
            ),
        ]:
            assert _message(owner_call).replace("'m'", "?") == _message(unknown_call).replace("'x'", "?")


def test_another_owners_training_job_is_not_revealed(db: Any) -> None:
    _job(db, "alice", name="fresh")  # queued, no version yet
    with db() as s:
        with pytest.raises(Conflict, match="training job"):
            models.resolve_version(session=s, name="fresh", owner="alice")
        with pytest.raises(NotFound, match="No model named 'fresh'"):
            models.resolve_version(session=s, name="fresh", owner="bob")


def test_a_taken_name_is_a_409_for_another_owner(db: Any) -> None:
    _register(db, "m", _job(db, "alice"), "alice")
    with db() as s:
        models.check_name(session=s, name="m", owner="alice")
        models.check_name(session=s, name="new", owner="bob")
        models.check_name(session=s, name="m", owner=None)  # an admin
        with pytest.raises(Conflict, match="belongs to another owner"):
            models.check_name(session=s, name="m", owner="bob")


def test_two_owners_racing_for_a_new_name(db: Any) -> None:
    """Both were queued before the name existed; the first to finish owns it, the other's registration fails."""
    alice_job, bob_job = _job(db, "alice"), _job(db, "bob")
    assert _register(db, "m", alice_job, "alice") == 1
    with pytest.raises(Conflict, match="taken by another owner"):
        _register(db, "m", bob_job, "bob")
    # a job queued after the name existed passed POST /train's check (an admin's): it registers
    assert _register(db, "m", _job(db, "root"), "root") == 2
    with db() as s:
        assert models.get_version(session=s, name="m", version=2, owner="alice").version == 2


def test_datasets_by_owner(db: Any, tmp_path: Any) -> None:
    from app.db.base import utcnow
    from app.db.models import Dataset

    with transaction(db) as s:
        for owner, ident in (("alice", "a" * 32), ("bob", "b" * 32)):
            s.add(Dataset(id=ident, uri="x", resolved_uri="/x", format="csv", owner=owner, created_at=utcnow()))
    with db() as s:
        assert [d.owner for d in datasets.list_datasets(session=s, owner="alice")] == ["alice"]
        assert len(datasets.list_datasets(session=s)) == 2
        assert datasets.get_dataset(session=s, dataset_id="a" * 32, owner="alice").owner == "alice"
        assert _message(lambda: datasets.get_dataset(session=s, dataset_id="a" * 32, owner="bob")) == (
            f"No dataset with id {'a' * 32!r}."
        )
        datasets.check_reference(session=s, uri="a" * 32, owner="alice", roots=[tmp_path], loc="dataset.uri")
        datasets.check_reference(session=s, uri="a" * 32, owner=None, roots=[tmp_path], loc="dataset.uri")
        # another owner's id answers as an id of no dataset: the message says what such a uri may be
        with pytest.raises(ValidationFailed, match="is neither one of your registered datasets' ids") as caught:
            datasets.check_reference(session=s, uri="a" * 32, owner="bob", roots=[tmp_path], loc="dataset.uri")
        assert str(tmp_path) in str(caught.value)


def test_the_online_resolution_cache_serves_only_the_owner(db: Any) -> None:
    from app.schemas.inference import ModelSelector
    from app.services.resolved_models import ResolvedModels

    _register(db, "m", _job(db, "alice"), "alice")
    cache = ResolvedModels()
    selector = ModelSelector(name="m", version=1)
    key = ("m", 1, None, None)
    assert cache.get(db, selector, owner="alice").version == 1
    assert cache.peek(key, owner="alice") is not None and cache.peek(key) is not None
    assert cache.peek(key, owner="bob") is None
    with pytest.raises(NotFound, match="No model named 'm'"):
        cache.get(db, selector, owner="bob")
    assert cache.get(db, selector).version == 1  # an admin


def test_an_alias_moved_on_this_driver_is_resolved_again_at_once(db: Any) -> None:
    """The next prediction by the alias took the old version for up to the cache's two seconds (walkthrough)."""
    from app.schemas.inference import ModelSelector
    from app.services.resolved_models import ResolvedModels

    for _ in range(2):
        _register(db, "moved", _job(db, "alice", "moved"), "alice")
    with transaction(db) as s:
        models.set_alias(session=s, name="moved", alias="champion", version=1, owner="alice")
    cache, champion = ResolvedModels(ttl_s=3600), ModelSelector(name="moved", alias="champion")
    assert cache.get(db, champion).version == 1
    assert cache.get(db, ModelSelector(name="moved", version=1)).version == 1
    with transaction(db) as s:
        models.set_alias(session=s, name="moved", alias="champion", version=2, owner="alice")
    assert cache.get(db, champion).version == 1  # what another driver sees until its entry is older than ttl_s
    cache.forget("moved")
    assert cache.get(db, champion).version == 2
    assert ("moved", 1, None, None) in cache._items  # a fixed version stays: it never changes
