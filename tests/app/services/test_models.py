"""The registry on both databases: version numbers, one version per job, lookups."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from app.core.errors import NotFound
from app.db.session import transaction
from app.services import jobs, models


def _job(db: Any) -> str:
    with transaction(db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={})
        return job.id


def _register(db: Any, name: str, job_id: str | None) -> int:
    with transaction(db) as s:
        v = models.register_version(
            session=s, name=name, framework="spark_ml", artifact_uri="file:///x", metrics={}, params={}, job_id=job_id
        )
        return v.version


def test_versions_count_up(db: Any) -> None:
    assert [_register(db, "m", _job(db)) for _ in range(3)] == [1, 2, 3]
    assert _register(db, "other", None) == 1
    with db() as s:
        names = [m.name for m in models.page_models(session=s)[0]]
        assert names == ["m", "other"]
        assert models.get_version(session=s, name="m", version=2).version == 2
        with pytest.raises(NotFound, match="no version 9"):
            models.get_version(session=s, name="m", version=9)
        with pytest.raises(NotFound, match="No model named"):
            models.get_version(session=s, name="nope", version=1)


def test_one_version_per_job(db: Any) -> None:
    job_id = _job(db)
    _register(db, "m", job_id)
    with pytest.raises(IntegrityError):
        _register(db, "m", job_id)  # a replayed job cannot register twice


def test_concurrent_registrations_get_distinct_versions(db: Any) -> None:
    job_ids = [_job(db) for _ in range(5)]
    out: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(job_ids))

    def register(job_id: str) -> None:
        barrier.wait()
        version = _register(db, "race", job_id)
        with lock:
            out.append(version)

    threads = [threading.Thread(target=register, args=(j,)) for j in job_ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(out) == [1, 2, 3, 4, 5]


def test_aliases_are_set_moved_and_removed(db: Any) -> None:
    # Setting an alias twice locks its row: PostgreSQL once refused the lock on the join that loads the version.
    _register(db, "m", None)
    _register(db, "m", None)
    with transaction(db) as s:
        assert models.set_alias(session=s, name="m", alias="champion", version=1).version.version == 1
    with transaction(db) as s:
        assert models.set_alias(session=s, name="m", alias="champion", version=2).version.version == 2
    with db() as s:
        model_id = models.get_version(session=s, name="m", version=1).model_id
        assert [(a.alias, a.version.version) for a in models.aliases_of(session=s, model_id=model_id)] == [
            ("champion", 2)
        ]
        assert models.resolve_version(session=s, name="m", alias="champion").version == 2
    with transaction(db) as s:
        models.delete_alias(session=s, name="m", alias="champion")
    with db() as s, pytest.raises(NotFound, match=r"^Model 'm' has no alias 'champion'\.$"):
        models.delete_alias(session=s, name="m", alias="champion")
    # an unknown model is said to be one, as GET and PUT say (it said "Model 'nope' has no alias": walkthrough)
    with db() as s, pytest.raises(NotFound, match=r"^No model named 'nope'\.$"):
        models.delete_alias(session=s, name="nope", alias="champion")


def test_an_unknown_name_suggests_the_closest_of_the_callers_names(db: Any) -> None:
    """A typo (``taxi-fare-xgbost``) was answered 'No model named ...' and nothing more (a fresh user's audit)."""
    for name, owner in (("taxi-fare-xgboost", "alice"), ("taxi-fare-xgboost-v2", "bob")):
        with transaction(db) as s:
            models.register_version(session=s, name=name, framework="xgboost", artifact_uri="file:///x", metrics={},
                                    params={}, job_id=None, owner=owner)  # fmt: skip
    with db() as s:
        with pytest.raises(NotFound) as typo:
            models.resolve_version(session=s, name="taxi-fare-xgbost", owner="alice")
        assert str(typo.value.detail) == "No model named 'taxi-fare-xgbost'. Did you mean 'taxi-fare-xgboost'?"
        with pytest.raises(NotFound) as other:  # only the caller's names: another owner's stay unknown
            models.resolve_version(session=s, name="taxi-fare-xgboost-v3", owner="alice")
        assert "Did you mean 'taxi-fare-xgboost'?" in str(other.value.detail)
        with pytest.raises(NotFound) as nothing:
            models.get_model(session=s, name="digits", owner="alice")
        assert str(nothing.value.detail) == "No model named 'digits'."
