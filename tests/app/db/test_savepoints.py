"""Work inside a savepoint belongs to the session's transaction on both databases: a rollback undoes it. On
SQLite, pysqlite's legacy transaction handling would otherwise let a savepoint opened before any write become the
transaction itself and commit when released (app.db.session.savepoint)."""

from __future__ import annotations

from typing import Any

import pytest

from app.db.models import Job, Model, ModelVersion
from app.db.session import transaction
from app.services import jobs, models


def test_a_rolled_back_transaction_leaves_no_job(db: Any) -> None:
    with pytest.raises(RuntimeError), transaction(db) as s:
        jobs.create_job(session=s, job_type="train", request={"name": "m"}, framework="torch", name="m")
        raise RuntimeError("after the job row")
    with db() as s:
        assert s.query(Job).count() == 0


def test_a_rolled_back_transaction_leaves_no_model_version(db: Any) -> None:
    with pytest.raises(RuntimeError), transaction(db) as s:
        models.register_version(session=s, name="m", framework="torch", artifact_uri="file:///m", metrics={},
                                params={}, job_id=None)  # fmt: skip
        raise RuntimeError("after the version")
    with db() as s:
        assert (s.query(Model).count(), s.query(ModelVersion).count()) == (0, 0)


def test_the_idempotency_race_still_answers_the_first_job(db: Any) -> None:
    """The savepoint's own purpose: a duplicate key rolls back to it, and the transaction goes on."""
    with transaction(db) as s:
        first, created = jobs.create_job(session=s, job_type="train", request={"name": "m"}, framework="torch",
                                         name="m", idempotency_key="k")  # fmt: skip
    assert created
    with transaction(db) as s:
        again, created = jobs.create_job(session=s, job_type="train", request={"name": "m"}, framework="torch",
                                         name="m", idempotency_key="k")  # fmt: skip
    assert (again.id, created) == (first.id, False)
