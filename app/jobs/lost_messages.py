"""QUEUED jobs whose message the Redis broker no longer holds, sent again.

Redis is an at-most-once broker in two small windows, and a job whose message falls into one stays QUEUED for ever:

- kombu takes a message off the queue with ``BRPOP`` and records it as unacknowledged with a second command; a
  Redis killed between the two has lost the message (the pop is in its append-only file, the record is not);
- a consumer whose connection breaks drops the messages it had taken but not started (Celery clears its reserved
  requests: their delivery tags belong to the dead channel), and Redis gives them back only after the visibility
  timeout, hours away (``SPARKTRAIN_VISIBILITY_TIMEOUT_S``, longer than any job).

So, in each reconciler pass, the jobs that are QUEUED (not waiting for their owner's quota, and not a retry whose
message is still due: app/services/reconcile.py sends those) are looked for among the messages waiting on their
queues. A job that has been missing from them for ``lost_message_after_s`` is sent again, and logs so. Normally a
QUEUED job's message is on its queue, or was taken milliseconds ago and the job is already STARTING; a job missing
for that long has lost its message, or (rarely) its message waits in a live consumer for a free thread. A second copy
is harmless either way: only one delivery wins QUEUED -> STARTING, the other logs that it was ignored. A job sent
again and still missing is sent again after twice as long, and so on.

One ``LRANGE`` per queue per pass: the cost grows with the queue's length (about 2 ms for 1,000 waiting messages).
The embedded SQLite broker needs none of this: it hides and deletes messages in transactions, and the driver that
owns it makes every hidden message visible again at start (``restore_unacked_embedded``).
"""

from __future__ import annotations

import base64
import json
import logging
import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, load_only, sessionmaker

from app.core.jobstates import JobStatus
from app.core.settings import Settings
from app.db.models import Job
from app.db.session import transaction
from app.services import attempts, jobs
from app.services.reconcile import Send
from workers.families import task_name

log = logging.getLogger("sparktrain")

PRIORITY_SEP = "\x06\x16"
"""kombu's Redis transport keeps a message of priority p > 0 on the list ``queue + PRIORITY_SEP + step``."""
PRIORITY_STEPS = (3, 6, 9)


def is_redis(url: str) -> bool:
    return url.startswith(("redis://", "rediss://"))


def job_id_of(raw: bytes | str) -> str | None:
    """The job id a Celery message on a kombu Redis list carries (its first argument), or None for a message that
    is not one of ours."""
    try:
        message = json.loads(raw)
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0]
        return str(args[0]) if args else None
    except (ValueError, KeyError, IndexError, TypeError):
        return None


class LostMessages:
    """The sweep; one per reconciler. ``send(task, job_id, queue)`` as the reconciler's."""

    def __init__(self, *, settings: Settings, db: sessionmaker[Session], send: Send) -> None:
        self._settings, self._db, self._send = settings, db, send
        self._after_s = settings.lost_message_after_s
        self._client: Any = None
        if is_redis(settings.broker_url) and self._after_s > 0:
            import redis

            self._client = redis.Redis.from_url(settings.broker_url, socket_timeout=5, socket_connect_timeout=5)
        self._missing_since: dict[str, float] = {}
        self._resends: dict[str, int] = {}

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def run_once(self) -> list[dict[str, Any]]:
        """Send again the jobs missing from the broker for long enough; returns what was done (the reconciler's
        action format). Raises the broker's or the database's error when either is away."""
        if self._client is None:
            return []
        queued = self._queued()
        if not queued:
            self._missing_since.clear()
            self._resends.clear()
            return []
        waiting = self._waiting({queue for _, _, queue in queued})
        now = time.monotonic()
        actions = []
        for job_id, task, queue in queued:
            if job_id in waiting:
                self._missing_since.pop(job_id, None)
                continue
            since = self._missing_since.setdefault(job_id, now)
            resends = self._resends.get(job_id, 0)
            if now - since < self._after_s * 2**resends:
                continue
            self._send(task, job_id, queue)
            self._resends[job_id] = resends + 1
            self._missing_since.pop(job_id, None)
            self._log(job_id, now - since)
            actions.append({"job_id": job_id, "action": "sent again: its message was in no queue of the broker"})
        ids = {job_id for job_id, _, _ in queued}
        for seen in (self._missing_since, self._resends):
            for job_id in [j for j in seen if j not in ids]:
                del seen[job_id]
        return actions

    def _queued(self) -> list[tuple[str, str, str]]:
        """(id, task, queue) of every QUEUED job whose message should be on a queue now."""
        with self._db() as s:
            columns = load_only(Job.id, Job.type, Job.framework, Job.attempt, Job.attempts)  # not the request
            rows = s.execute(
                select(Job).options(columns).where(Job.status == JobStatus.QUEUED.value, Job.waiting_for.is_(None))
            ).scalars()
            found = []
            for job in rows:
                if not attempts.message_sent(job):
                    continue  # a retry whose message is due later, or was refused: the reconciler sends it
                queue = attempts.queue_of(job) or self._settings.queue
                found.append((job.id, task_name(job.type, job.framework or ""), queue))
        return found

    def _waiting(self, queues: set[str]) -> set[str]:
        """The job ids of the messages waiting on ``queues`` (every priority's list)."""
        pipe = self._client.pipeline(transaction=False)
        for queue in sorted(queues):
            pipe.lrange(queue, 0, -1)
            for step in PRIORITY_STEPS:
                pipe.lrange(f"{queue}{PRIORITY_SEP}{step}", 0, -1)
        return {job_id for items in pipe.execute() for raw in items if (job_id := job_id_of(raw)) is not None}

    def _log(self, job_id: str, missing_s: float) -> None:
        message = (
            f"its message was in no queue of the broker for {missing_s:.0f} s while the job was QUEUED (a broker "
            "restart can lose a message being taken): sent again"
        )
        with transaction(self._db) as s:
            jobs.add_log(session=s, job_id=job_id, message=message)
        log.warning("job %s: %s", job_id, message)
