"""Apply Alembic migrations on start-up (``upgrade head``), serialised between drivers on PostgreSQL."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, text

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).with_name("migrations")
_PG_LOCK_KEY = 0x5350_4B54  # "SPKT": one advisory lock for every driver that migrates the same database


def alembic_config(engine: Engine) -> Config:
    # alembic logs one INFO line per plugin as it is first imported (seven at every start): quiet before importing
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["engine"] = engine
    return cfg


def newer_revision(conn: Connection) -> tuple[str, str] | None:
    """(the database's schema revision, this release's newest) when this release does not know the database's: a
    newer release migrated it (a rollback, or drivers of two releases on one database). Alembic's own error for it
    is a traceback at start-up."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    logging.getLogger("alembic").setLevel(logging.WARNING)
    script = ScriptDirectory(str(MIGRATIONS))
    known = {r.revision for r in script.walk_revisions()}
    unknown = [r for r in MigrationContext.configure(conn).get_current_heads() if r not in known]
    return (unknown[0], str(script.get_current_head())) if unknown else None


def upgrade_database(engine: Engine) -> None:
    """Bring the schema to the newest revision; two drivers starting together on PostgreSQL take turns."""
    cfg = alembic_config(engine)
    from alembic import command

    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_LOCK_KEY})
            try:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
                conn.commit()
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_LOCK_KEY})
                conn.commit()
    else:  # SQLite: one write transaction from the first read, so that an upgrade is all or nothing and drivers
        # take turns (pysqlite begins one only at the first INSERT: a table copy's CREATE committed on its own, and a
        # failure after it left a half-done revision that stopped every later start)
        with engine.connect() as conn:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
            except BaseException:
                conn.rollback()
                raise
            conn.commit()
