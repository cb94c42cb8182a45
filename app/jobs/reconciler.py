"""The reconciler's thread: one pass at start-up, then one every ``reconcile_interval_s``. A pass (the logic is
app/services/reconcile.py and app/services/quotas.py):

- fails the attempts of jobs whose driver died (heartbeat older than ``heartbeat_stale_s``) and queues them again;
- sends retries that are due (a delayed retry, or one the broker refused);
- sends again the jobs waiting for their owner's quota that fit now;
- on a Redis broker, sends again the QUEUED jobs whose message the broker lost (app/jobs/lost_messages.py).

Right after the database was away, heartbeats could not be written either: the pass does not look for lost jobs
until the database has answered for ``heartbeat_stale_s``, so a database restart never passes for dead drivers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from app.core.settings import Settings
from app.db.session import unavailable

log = logging.getLogger("sparktrain")


class Reconciler:
    def __init__(self, *, settings: Settings, db: sessionmaker[Session], send: Callable[[str, str, str], None]) -> None:
        self._settings, self._db, self._send = settings, db, send
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reconciler", daemon=True)
        self._db_back_at: float | None = None
        """When the database answered again after a pass that found it away (None: it was never away)."""
        from app.jobs.lost_messages import LostMessages

        self._lost_messages = LostMessages(settings=settings, db=db, send=send)

    def start(self) -> None:
        self.run_once()
        self._thread.start()

    def stop(self, *, wait: bool = True) -> None:
        self._stop.set()
        if wait and self._thread.is_alive():
            self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._lost_messages.close()

    def run_once(self) -> list[dict[str, Any]]:
        from app.services import attempts, quotas
        from app.services.reconcile import reconcile

        settle_s = self._settings.heartbeat_stale_s
        trusted = self._db_back_at is None or time.monotonic() - self._db_back_at >= settle_s
        try:
            actions = reconcile(
                db=self._db,
                send=self._send,
                stale_after_s=settle_s,
                default_queue=self._settings.queue,
                look_for_lost=trusted,
            )
            woken = quotas.wake(db=self._db, settings=self._settings, send=self._send, queue_of=attempts.queue_of)
            actions += [{"job_id": job_id, "action": "woken"} for job_id in woken]
        except Exception as exc:
            if unavailable(exc):
                log.warning("the reconciler's pass found the database away (%s); lost jobs are looked for again once "
                            "it has answered for %.0f s", type(exc).__name__, settle_s)  # fmt: skip
                self._db_back_at = time.monotonic() + 1e9  # until a pass succeeds
            else:
                log.exception("the reconciler's pass failed")
            return []
        if self._db_back_at is not None and self._db_back_at > time.monotonic():
            self._db_back_at = time.monotonic()
        try:
            actions += self._lost_messages.run_once()
        except Exception as exc:  # the broker or the database away: the next pass looks again
            log.warning("the reconciler could not look for lost messages (%s: %s)", type(exc).__name__, exc)
        for action in actions:
            log.warning("reconciler: job %s %s", action["job_id"], action["action"])
        return actions

    def _run(self) -> None:
        while not self._stop.wait(self._settings.reconcile_interval_s):
            self.run_once()
