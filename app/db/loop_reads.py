"""The read a client polls, ``GET /jobs/{id}``, answered on the event loop on PostgreSQL.

Everything else in the service reads through SQLAlchemy's blocking sessions, which a request runs in the thread
pool. Under load that hop is the tail of the service's own latency: a thread has to be free, and the GIL has to
come back to it, behind the threads already there (``bench.load``'s ninth and tenth rounds, bench/README.md). Here
one statement on one of a few psycopg async connections does the read on the loop; the row becomes a detached
:class:`~app.db.models.Job`, the object the blocking path returns (a test compares the two answers).

SQLAlchemy's own asyncio engine was tried first and was slower than the hop: its greenlet bridge and the ORM cost
more CPU per read than the thread does. Only PostgreSQL through psycopg gets this path; on SQLite a read is a call
into the process's own library, and the thread pool keeps it off the loop.

Connections are opened on first use on the running loop (at most ``size``), run in autocommit (one round trip a
read, no ``BEGIN``/``ROLLBACK``), and are dropped after any error. A read that fails on a connection that waited in
the pool (a restarted server closed it) is tried once more on a new one, which is what the blocking engine's
pre-ping gives its reads; if the database is away, the error reaches the API's 503 handler.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from app.db.base import UTCDateTime
from app.db.models import Job

log = logging.getLogger("sparktrain.db")

DATABASE_AWAY: tuple[type[Exception], ...] = (psycopg.OperationalError, psycopg.InterfaceError)
"""What psycopg raises while the server restarts or cannot be reached (the API answers them 503)."""

_COLUMNS = [c for c in Job.__table__.columns]
_TIMES = {c.name for c in _COLUMNS if isinstance(c.type, UTCDateTime)}
_SELECT_JOB = f"SELECT {', '.join(c.name for c in _COLUMNS)} FROM jobs WHERE id = %s"


class LoopReads:
    """A few psycopg async connections to PostgreSQL, used only from the event loop."""

    def __init__(self, url: str, size: int = 5, connect_timeout_s: int = 10) -> None:
        self._conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self._size, self._timeout = size, connect_timeout_s
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @staticmethod
    def supports(url: str) -> bool:
        parsed = make_url(url)
        return parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() == "psycopg"

    async def job(self, job_id: str) -> Job | None:
        """The job with this id, detached (no session), or None."""
        row = await self._fetch_one(_SELECT_JOB, (job_id,))
        if row is None:
            return None
        values = {c.name: v for c, v in zip(_COLUMNS, row, strict=True)}
        for name in _TIMES:
            values[name] = _UTC.process_result_value(values[name], _DIALECT)
        return Job(**values)

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await _quietly_close(conn)

    async def _fetch_one(self, statement: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
        slots = self._slots_on_this_loop()
        async with slots:
            for retry in (True, False):
                pooled = bool(self._idle)
                conn = self._idle.pop() if pooled else await self._connect()
                try:
                    cur = await conn.execute(statement, params)
                    row = await cur.fetchone()
                except psycopg.Error:
                    await _quietly_close(conn)
                    if pooled and retry:
                        continue  # a connection the server closed while it waited here: once more, on a new one
                    raise
                except BaseException:  # cancelled mid-read (the client went away): the connection is mid-statement
                    await asyncio.shield(_quietly_close(conn))
                    raise
                self._idle.append(conn)
                return row
        raise AssertionError("unreachable")

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True, connect_timeout=self._timeout)

    def _slots_on_this_loop(self) -> asyncio.Semaphore:
        """At most ``size`` reads at once, each on its own connection (so never more connections than that). A new
        loop (a test's second client) starts over: connections belong to the loop that opened them."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._loop is not loop:
            self._idle, self._loop, self._slots = [], loop, asyncio.Semaphore(self._size)
        return self._slots


async def _quietly_close(conn: psycopg.AsyncConnection[Any]) -> None:
    try:
        await conn.close()
    except Exception as exc:
        log.debug("closing a broken loop connection failed: %s", exc)


def _postgresql_dialect() -> Any:
    from sqlalchemy.dialects.postgresql import psycopg as pg_psycopg

    return pg_psycopg.dialect()


_DIALECT = _postgresql_dialect()
_UTC = UTCDateTime()
