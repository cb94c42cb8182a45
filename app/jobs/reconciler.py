"""The reconciler's thread: one pass at start-up, then one every ``reconcile_interval_s`` (the pass itself is
app/services/reconcile.py: jobs whose driver died are failed, and resumable ones retried)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.core.settings import Settings

log = logging.getLogger("sparktrain")


class Reconciler:
    def __init__(self, *, settings: Settings, db: sessionmaker[Session], send: Callable[[str, str, str], None]) -> None:
        self._settings, self._db, self._send = settings, db, send
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reconciler", daemon=True)

    def start(self) -> None:
        self.run_once()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def run_once(self) -> list[dict[str, Any]]:
        from app.services.reconcile import reconcile

        try:
            actions = reconcile(
                db=self._db,
                send=self._send,
                stale_after_s=self._settings.heartbeat_stale_s,
                default_queue=self._settings.queue,
            )
        except Exception:
            log.exception("the reconciler's pass failed")
            return []
        for action in actions:
            log.warning("reconciler: job %s %s", action["job_id"], action["action"])
        return actions

    def _run(self) -> None:
        while not self._stop.wait(self._settings.reconcile_interval_s):
            self.run_once()
