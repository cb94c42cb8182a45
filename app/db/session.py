"""Engine and session factories (built at start-up, never at import)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker


def create_db_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and cross-thread use (jobs run on threads)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10)


def create_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose work is committed on success and rolled back on any error."""
    with factory() as session, session.begin():
        yield session


def savepoint(session: Session) -> SessionTransaction:
    """``session.begin_nested()`` that stays inside the session's transaction on SQLite too.

    pysqlite (Python < 3.12's default transaction handling) begins a transaction only before an INSERT, UPDATE or
    DELETE. A SAVEPOINT issued before any of them therefore opens the transaction itself, and releasing it
    commits: the writes after it would land apart, and a rollback would not undo it. A no-op UPDATE first makes
    pysqlite begin the real transaction. PostgreSQL needs nothing."""
    if session.get_bind().dialect.name == "sqlite":
        raw = session.connection().connection.dbapi_connection
        if raw is not None and not raw.in_transaction:
            session.execute(text("UPDATE jobs SET id = id WHERE 1 = 0"))
    return session.begin_nested()
