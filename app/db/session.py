"""Engine and session factories (built at start-up, never at import)."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event, exc, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

log = logging.getLogger("sparktrain.db")
T = TypeVar("T")


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


def create_read_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Sessions for requests that only read (GET): on PostgreSQL each statement runs on its own, with no BEGIN
    before and no ROLLBACK after (``AUTOCOMMIT``), which halves a one-query request's round trips to the server (a
    pool ping, BEGIN, the query, ROLLBACK become the ping and the query). Under load every round trip waits for a
    server process to be scheduled: ``bench.load``. SQLite has no round trips; its sessions stay as they are."""
    if engine.dialect.name == "sqlite":
        return create_sessionmaker(engine)
    return sessionmaker(engine.execution_options(isolation_level="AUTOCOMMIT"), expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose work is committed on success and rolled back on any error."""
    with factory() as session, session.begin():
        yield session


def unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the database is away for now (a restart, a dropped connection, a full pool, SQLite's
    "database is locked"), rather than that the statement is wrong: worth trying again."""
    if isinstance(error, exc.DBAPIError) and error.connection_invalidated:
        return True
    return isinstance(error, exc.OperationalError | exc.InterfaceError | exc.TimeoutError)


def retrying(
    factory: sessionmaker[Session],
    work: Callable[[Session], T],
    *,
    budget_s: float,
    what: str = "",
    begin: Callable[[], AbstractContextManager[Session]] | None = None,
) -> T:
    """``work(session)`` in one transaction, run again from the start (a new transaction, a new connection) while
    the database is away, with exponential backoff and jitter for up to ``budget_s`` seconds; then the error is
    raised. For the job runner's writes: a PostgreSQL restart must not fail a job that is training. ``begin`` opens
    the transaction instead of :func:`transaction` (one that takes a lock first, say).

    The work must be safe to run twice: a commit whose answer was lost may have happened (the runner's writes are
    guarded transitions or idempotent updates)."""
    deadline = time.monotonic() + budget_s
    delay = 0.1
    while True:
        try:
            with (begin or (lambda: transaction(factory)))() as session:
                return work(session)
        except Exception as error:
            if not unavailable(error) or time.monotonic() + delay > deadline:
                raise
            log.warning("the database is away (%s)%s; trying again in %.1f s", type(error).__name__,
                        f" while {what}" if what else "", delay)  # fmt: skip
            time.sleep(delay)
            delay = min(delay * 2, 5.0) * random.uniform(0.8, 1.2)


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
