"""GET /jobs/{id}'s read on the event loop (app/db/loop_reads.py), on a real PostgreSQL: the same answer as the
blocking path's, other owners' jobs hidden, one connection per concurrent read up to the pool's size, a connection
the server closed replaced on the next read, and an unreachable server an error the API answers 503."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from app.api.job_views import to_job_read
from app.core.auth import ANONYMOUS, Caller
from app.core.errors import NotFound
from app.db.loop_reads import LoopReads
from app.db.models import Job
from app.db.session import transaction
from app.services import jobs
from app.services.access import job_of_on_loop
from app.services.health import DATABASE_AWAY
from tests.helpers import free_port

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def _job(db: Any, **values: Any) -> str:
    with transaction(db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={"a": [1, 2.5, "x"]}, framework="torch",
                                 name="loop", owner="ann")  # fmt: skip
        for key, value in values.items():
            setattr(job, key, value)
        return job.id


def test_the_loop_read_answers_as_the_blocking_read_does(db: Any, db_url: str) -> None:
    job_id = _job(db, status="SUCCEEDED", progress=1.0, result={"validation": {"accuracy": 0.98}}, attempt=2,
                  attempts=[{"attempt": 1, "status": "FAILED", "error_reason": "DRIVER_LOST"}], warnings=["w"],
                  started_at=datetime(2026, 12, 5, 22, 0, 1, 123456, tzinfo=UTC), model_name="m", model_version=3,
                  error_reason=None, slots=2, trial=4)  # fmt: skip
    with db() as s:
        blocking = to_job_read(s.get(Job, job_id))
    # a session in another time zone: the times still come back in UTC, as the blocking path gives them
    reads = LoopReads(f"{db_url}?options=-c%20TimeZone%3DAsia/Tokyo")

    async def read() -> Any:
        try:
            return to_job_read(await job_of_on_loop(reads=reads, job_id=job_id, caller=Caller("ann", admin=False)))
        finally:
            await reads.close()

    on_loop = asyncio.run(read())
    assert on_loop.model_dump_json() == blocking.model_dump_json()
    assert on_loop.started_at == datetime(2026, 12, 5, 22, 0, 1, 123456, tzinfo=UTC)
    assert on_loop.started_at.utcoffset() == timedelta(0) and on_loop.created_at.utcoffset() == timedelta(0)
    assert on_loop.request == {"a": [1, 2.5, "x"]} and on_loop.attempts[0]["error_reason"] == "DRIVER_LOST"


def test_other_owners_and_missing_jobs_are_not_found(db: Any, db_url: str) -> None:
    job_id = _job(db)
    reads = LoopReads(db_url)

    async def read() -> None:
        try:
            assert (await job_of_on_loop(reads=reads, job_id=job_id, caller=ANONYMOUS)).owner == "ann"
            for caller, wanted in ((Caller("bob", admin=False), job_id), (ANONYMOUS, "0" * 32)):
                with pytest.raises(NotFound, match="No job with id"):
                    await job_of_on_loop(reads=reads, job_id=wanted, caller=caller)
        finally:
            await reads.close()

    asyncio.run(read())


def test_concurrent_reads_share_at_most_size_connections_in_autocommit(db: Any, db_url: str) -> None:
    job_id = _job(db)
    reads = LoopReads(db_url, size=2)

    async def burst(close: bool) -> list[Any]:
        found = await asyncio.gather(*(reads.job(job_id) for _ in range(20)))
        assert len(reads._idle) == 2, "two connections served twenty reads"
        assert all(conn.autocommit for conn in reads._idle), "no BEGIN or ROLLBACK around a read"
        if close:
            await reads.close()
            assert reads._idle == []
        else:  # what a loop that ends without the service's lifespan leaves behind
            for conn in reads._idle:
                await conn.close()
        return found

    assert {job.id for job in asyncio.run(burst(close=False))} == {job_id}
    # a new event loop (a test's second client) starts a new pool and still reads
    assert asyncio.run(burst(close=True))[0].name == "loop"


def test_connections_the_server_closed_are_all_replaced_on_the_next_read(db: Any, db_url: str) -> None:
    job_id = _job(db)
    reads = LoopReads(db_url, size=2)

    async def read() -> None:
        try:
            await asyncio.gather(reads.job(job_id), reads.job(job_id))
            pids = {conn.info.backend_pid for conn in reads._idle}
            assert len(pids) == 2
            with db() as s:  # what a server restart does to every pooled connection
                for pid in pids:
                    assert s.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar() is True
            await asyncio.sleep(0.2)
            assert (await reads.job(job_id)) is not None, "the first read after it went to a new connection"
            (replaced,) = reads._idle  # the other dead one was dropped with it, not left for the next read
            assert replaced.info.backend_pid not in pids
            assert (await reads.job(job_id)) is not None
        finally:
            await reads.close()

    asyncio.run(read())


def test_a_read_cancelled_mid_statement_closes_its_connection_and_frees_its_slot(db: Any, db_url: str) -> None:
    job_id = _job(db)
    reads = LoopReads(f"{db_url}?application_name=loop-reads-cancel", size=1)

    def server_side() -> int:  # this pool's connections, as the server counts them
        with db() as s:
            query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'loop-reads-cancel'"
            return int(s.execute(text(query)).scalar_one())

    async def read() -> None:
        try:
            await reads.job(job_id)
            with db() as s, s.begin():
                s.execute(text("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE"))  # the next SELECT waits for it
                waiting = asyncio.create_task(reads.job(job_id))
                await asyncio.sleep(0.5)
                assert not waiting.done()
                waiting.cancel()  # the client went away
                with pytest.raises(asyncio.CancelledError):
                    await waiting
            assert reads._idle == [], "a connection in the middle of a statement is not pooled"
            await asyncio.sleep(0.5)
            assert server_side() == 0, "it was closed, not leaked"
            assert (await asyncio.wait_for(reads.job(job_id), 10)) is not None, "its one slot is free again"
            assert server_side() == 1
        finally:
            await reads.close()

    asyncio.run(read())


def test_a_statements_own_error_keeps_the_connection_and_is_not_retried(db: Any, db_url: str) -> None:
    reads = LoopReads(db_url)

    async def read() -> None:
        try:
            with pytest.raises(psycopg.errors.UndefinedColumn) as raised:
                await reads._fetch_one("SELECT no_such_column FROM jobs", ())
            assert not isinstance(raised.value, DATABASE_AWAY), "a 500, not a 503"
            (kept,) = reads._idle
            assert (await reads._fetch_one("SELECT 1", ())) == (1,) and reads._idle == [kept]
        finally:
            await reads.close()

    asyncio.run(read())


def test_an_unreachable_server_is_an_error_the_api_answers_503(db_url: str) -> None:
    reads = LoopReads(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nowhere", connect_timeout_s=2)

    async def read() -> None:
        with pytest.raises(psycopg.OperationalError) as raised:
            await reads.job("0" * 32)
        assert isinstance(raised.value, DATABASE_AWAY)
        assert reads._idle == []

    asyncio.run(read())


@pytest.mark.parametrize("url", ["sqlite:///x.db", "sqlite://", "postgresql+psycopg2://h/d"])
def test_only_postgresql_through_psycopg_reads_on_the_loop(url: str, db_url: str) -> None:
    assert not LoopReads.supports(url)
    assert LoopReads.supports(db_url)
