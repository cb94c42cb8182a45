"""Apply Alembic migrations on start-up (``upgrade head``), serialised between drivers on PostgreSQL; says what it
did (one line), and refuses to migrate a database that drivers of an older release still run jobs on."""

from __future__ import annotations

import logging
import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, DateTime, Engine, text

from app.core.jobstates import ACTIVE

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

log = logging.getLogger("sparktrain.db")

MIGRATIONS = Path(__file__).with_name("migrations")
_PG_LOCK_KEY = 0x5350_4B54  # "SPKT": one advisory lock for every driver that migrates the same database
HEARTBEAT_STALE_S = 30.0  # SPARKTRAIN_HEARTBEAT_STALE_S's default; the driver passes its own setting
_NAMED_JOBS = 5  # a refusal names this many live jobs, then counts the rest


class OlderDriversRunning(RuntimeError):
    """The database is behind this release's schema while jobs on it still heartbeat: drivers of the older
    release run, and would go on writing rows the new schema's rules do not expect. Its text is two lines."""


def alembic_config(engine: Engine) -> Config:
    # alembic logs one INFO line per plugin as it is first imported (seven at every start): quiet before importing
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def _script() -> ScriptDirectory:
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS))


def _current(conn: Connection) -> tuple[str, ...]:
    from alembic.runtime.migration import MigrationContext

    return tuple(MigrationContext.configure(conn).get_current_heads())


def newer_revision(conn: Connection) -> tuple[str, str] | None:
    """(the database's schema revision, this release's newest) when this release does not know the database's: a
    newer release migrated it (a rollback, or drivers of two releases on one database). Alembic's own error for it
    is a traceback at start-up."""
    script = _script()
    known = {r.revision for r in script.walk_revisions()}
    unknown = [r for r in _current(conn) if r not in known]
    return (unknown[0], str(script.get_current_head())) if unknown else None


def _pending(script: ScriptDirectory, current: tuple[str, ...]) -> list[str] | None:
    """The revisions an upgrade from ``current`` applies, oldest first, named ``0011 job output path``; None for a
    revision this release does not know (:func:`newer_revision`)."""
    known = {r.revision for r in script.walk_revisions()}
    if any(r not in known for r in current):
        return None
    steps = list(script.iterate_revisions("heads", current[0] if current else None))
    return [f"{s.revision} {Path(s.path).stem.partition('_')[2].replace('_', ' ')}".strip() for s in reversed(steps)]


def older_drivers_problem(
    conn: Connection, heartbeat_stale_s: float, *, database: str | None = None, now: datetime | None = None
) -> str | None:
    """Why this release must not migrate the database yet (two lines: who still runs, and what to do), or None.

    Only a database with revisions to apply is asked: drivers of one release start beside each other freely. A job in
    an active state whose heartbeat is younger than ``heartbeat_stale_s`` has a driver, of an older release (this
    one would find the schema up to date), which would go on writing rows under the new schema. Plain SQL on columns
    every revision has (0001): this runs before the migration. ``database``: its URL as shown (no password)."""
    script, current = _script(), _current(conn)
    if not current or not _pending(script, current):  # a new database, an up-to-date or a newer one
        return None
    now = now or datetime.now(UTC)
    states = ", ".join(f"'{s.value}'" for s in sorted(ACTIVE))
    query = text(
        f"SELECT id, worker_id, heartbeat_at FROM jobs WHERE status IN ({states}) AND heartbeat_at IS NOT NULL "
        "ORDER BY heartbeat_at DESC"
    ).columns(heartbeat_at=DateTime(timezone=True))
    live: list[tuple[str, str | None, float]] = []
    for job_id, worker, beat in conn.execute(query).all():
        beat_at = beat.replace(tzinfo=UTC) if beat.tzinfo is None else beat  # SQLite keeps UTC without its zone
        age = max(0.0, (now - beat_at).total_seconds())
        if age < heartbeat_stale_s:
            live.append((str(job_id), worker, age))
    if not live:
        return None
    named = ", ".join(f"job {j} (driver {w or '?'}, beat {a:.0f} s ago)" for j, w, a in live[:_NAMED_JOBS])
    more = f" and {len(live) - _NAMED_JOBS} more" if len(live) > _NAMED_JOBS else ""
    wait = max(1, math.ceil(heartbeat_stale_s - live[0][2]))
    shown = f"the database {database}" if database else "the database"
    return (f"{shown} is at schema revision {', '.join(current)} and this release would migrate it to "
            f"{script.get_current_head()}, but drivers of an older release still run jobs on it: {named}{more}.\n"
            "Stop every driver of the older release (SIGTERM hands their jobs back), then start this one; or wait "
            f"{wait} s if they are already stopped (SPARKTRAIN_HEARTBEAT_STALE_S={heartbeat_stale_s:g}).")  # fmt: skip


def _migrate(cfg: Config, conn: Connection, heartbeat_stale_s: float) -> None:
    """Upgrade on ``conn`` (its lock or transaction held by the caller), or refuse, and log which it was."""
    from alembic import command

    before = _current(conn)
    pending = _pending(_script(), before)
    if before and pending == []:
        log.info("database schema up to date (%s)", ", ".join(before))
        return
    problem = older_drivers_problem(conn, heartbeat_stale_s)
    if problem is not None:
        raise OlderDriversRunning(problem)
    started = time.monotonic()
    command.upgrade(cfg, "head")  # a revision this release does not know: alembic's error, as before
    took, after, steps = time.monotonic() - started, ", ".join(_current(conn)), pending or []
    if not before:
        log.info("database schema created (%s, %d migrations, %.1f s)", after, len(steps), took)
    else:
        plural = "" if len(steps) == 1 else "s"
        log.info("database schema %s → %s (%d migration%s: %s; %.1f s)", ", ".join(before), after, len(steps),
                 plural, ", ".join(steps), took)  # fmt: skip


def upgrade_database(engine: Engine, *, heartbeat_stale_s: float = HEARTBEAT_STALE_S) -> None:
    """Bring the schema to the newest revision; two drivers starting together on PostgreSQL take turns. A database
    with revisions to apply is refused (:class:`OlderDriversRunning`) while jobs on it still heartbeat."""
    cfg = alembic_config(engine)
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_LOCK_KEY})
            try:
                cfg.attributes["connection"] = conn
                _migrate(cfg, conn, heartbeat_stale_s)
                conn.commit()
            finally:
                conn.rollback()  # a refusal's reads, or a failed migration's statements: the unlock needs none
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_LOCK_KEY})
                conn.commit()
    else:  # SQLite: one write transaction from the first read, so that an upgrade is all or nothing and drivers
        # take turns (pysqlite begins one only at the first INSERT: a table copy's CREATE committed on its own, and a
        # failure after it left a half-done revision that stopped every later start)
        with engine.connect() as conn:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                cfg.attributes["connection"] = conn
                _migrate(cfg, conn, heartbeat_stale_s)
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
