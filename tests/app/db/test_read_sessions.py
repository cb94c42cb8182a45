"""A GET's session on PostgreSQL sends no BEGIN and no ROLLBACK (app/db/session.py, create_read_sessionmaker), and
the pooled connection it used is transactional again for the next write."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event, func, select

from app.db.models import Job
from app.db.session import create_read_sessionmaker, transaction
from app.services import jobs


@pytest.mark.parametrize("db_url", ["postgresql", "sqlite"], indirect=True)
def test_reads_run_without_a_transaction_on_postgresql_and_writes_keep_theirs(db: Any) -> None:
    engine = db.kw["bind"]
    postgresql = engine.dialect.name == "postgresql"
    with transaction(db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={"a": 1}, framework="torch", name="r")
        job_id = job.id
    sent: list[tuple[str, bool]] = []

    @event.listens_for(engine, "before_cursor_execute")
    def record(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        raw = conn.connection.dbapi_connection
        sent.append((statement.split(maxsplit=1)[0].upper(), bool(getattr(raw, "autocommit", False))))

    reads = create_read_sessionmaker(engine)
    for _ in range(3):  # the same pooled connection, again and again
        with reads() as s:
            assert s.get(Job, job_id) is not None
    assert [word for word, _ in sent] == ["SELECT"] * 3
    assert all(autocommit for _, autocommit in sent) == postgresql
    sent.clear()
    with pytest.raises(RuntimeError), transaction(db) as s:  # a write after the reads: still one transaction
        jobs.create_job(session=s, job_type="train", request={}, framework="torch", name="undone")
        s.flush()
        raise RuntimeError("roll it back")
    assert sent and not any(autocommit for _, autocommit in sent)
    with reads() as s:
        assert s.scalar(select(func.count()).select_from(Job).where(Job.name == "undone")) == 0
