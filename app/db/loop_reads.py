"""The read a client polls, ``GET /jobs/{id}``, answered on the event loop on PostgreSQL.

Everything else in the service reads through SQLAlchemy's blocking sessions, which a request runs in the thread
pool. Under load that hop is the tail of the service's own latency: a thread has to be free, and the GIL has to
come back to it, behind the threads already there (``bench.load``'s ninth and tenth rounds, bench/README.md). Here
one statement on one of a few psycopg async connections does the read on the loop; the row becomes a detached
:class:`~app.db.models.Job`, the object the blocking path returns (a test compares the two answers).

SQLAlchemy's own asyncio engine was tried first and was slower than the hop: its greenlet bridge and the ORM cost
more CPU per read than the thread does. Only PostgreSQL through psycopg gets this path; on SQLite a read is a call
into the process's own library, and the thread pool keeps it off the loop.

Connections are opened on first use on the running loop (at most ``size``, from the URL as SQLAlchemy reads it),
run in autocommit (one round trip a read, no ``BEGIN``/``ROLLBACK``), and are closed when a read breaks or is
cancelled. A read that loses a connection that waited in the pool (a restarted server closed them all) drops every
idle one and is tried once more on a new one, which is what the blocking engine's pre-ping gives its reads; if the
database is away, the error reaches the API's 503 handler. A statement's own error (a column a migration has not
added yet) keeps the connection and is a 500, as on the blocking path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import psycopg
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.engine import make_url

from app.db.base import UTCDateTime
from app.db.models import Job

log = logging.getLogger("sparktrain.db")

DATABASE_AWAY: tuple[type[Exception], ...] = (psycopg.OperationalError, psycopg.InterfaceError)
"""What psycopg raises while the server restarts or cannot be reached (the API answers them 503)."""

_COLUMNS = list(Job.__table__.columns)
_KEYS = [c.key for c in _COLUMNS]
_TIMES = {c.key for c in _COLUMNS if isinstance(c.type, UTCDateTime)}
_SELECT_JOB = "SELECT " + ", ".join(f'"{c.name}"' for c in _COLUMNS) + " FROM jobs WHERE id = %s"


class LoopReads:
    """A few psycopg async connections to PostgreSQL, used only from the event loop."""

    def __init__(self, url: str, size: int = 5, connect_timeout_s: int = 10, wait_s: float = 30.0) -> None:
        # the dialect's own reading of the URL (a multi-host URL, query options), as the blocking engine connects
        _, self._connect_args = _DIALECT.create_connect_args(make_url(url))
        self._size, self._timeout, self._wait_s = size, connect_timeout_s, wait_s
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @staticmethod
    def supports(url: str) -> bool:
        parsed = make_url(url)
        return parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() == "psycopg"

    async def job(self, job_id: str) -> Job | None:
        """The job with this id, detached (no session), or None."""
        row = await self._fetch_one(_SELECT_JOB, (job_id,))
        if row is None:
            return None
        values = dict(zip(_KEYS, row, strict=True))
        for key in _TIMES:
            values[key] = _UTC.process_result_value(values[key], _DIALECT)
        return Job(**values)

    async def close(self) -> None:
        """Close the idle connections; a read still running closes its own when it ends."""
        self._closed = True
        await self._close_idle()

    async def _fetch_one(self, statement: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
        slots = self._slots_on_this_loop()
        try:
            async with asyncio.timeout(self._wait_s):
                await slots.acquire()
        except TimeoutError:
            raise psycopg.OperationalError(f"no database connection came free within {self._wait_s:g} s") from None
        try:
            pooled = bool(self._idle)
            conn = self._idle.pop() if pooled else await self._connect()
            try:
                return await self._read(conn, statement, params)
            except DATABASE_AWAY:
                if not pooled:
                    raise
                # the server closed it while it waited here (a restart closes them all): drop every idle one, as
                # the blocking engine's pre-ping does, and try once more on a new connection
                await self._close_idle()
                return await self._read(await self._connect(), statement, params)
        finally:
            slots.release()

    async def _read(
        self, conn: psycopg.AsyncConnection[Any], statement: str, params: Sequence[Any]
    ) -> tuple[Any, ...] | None:
        """One statement on ``conn``; the connection goes back to the pool when it is still fit for the next one."""
        try:
            cur = await conn.execute(statement, params)
            row = await cur.fetchone()
        except psycopg.Error:
            if conn.broken or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                await _quietly_close(conn)
            else:
                self._give_back(conn)  # a statement's own error (a column a migration has not added yet)
            raise
        except BaseException:  # cancelled mid-read (the client went away): the connection is mid-statement
            await asyncio.shield(_quietly_close(conn))
            raise
        self._give_back(conn)
        return row

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(**self._connect_args, autocommit=True,
                                                     connect_timeout=self._timeout)  # fmt: skip

    def _give_back(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if self._closed or conn.closed:
            asyncio.get_running_loop().create_task(_quietly_close(conn))
        else:
            self._idle.append(conn)

    async def _close_idle(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await _quietly_close(conn)

    def _slots_on_this_loop(self) -> asyncio.Semaphore:
        """At most ``size`` reads at once, each on its own connection (so never more connections than that). A new
        loop (a test's second client) starts over: connections belong to the loop that opened them, and those of a
        loop that has ended cannot be closed from another; they are dropped."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._loop is not loop:
            self._idle, self._loop, self._slots = [], loop, asyncio.Semaphore(self._size)
        return self._slots


async def _quietly_close(conn: psycopg.AsyncConnection[Any]) -> None:
    try:
        await conn.close()
    except Exception as exc:
        log.debug("closing a broken loop connection failed: %s", exc)


_DIALECT = PGDialect_psycopg()
_UTC = UTCDateTime()
