"""Server-Sent Events of jobs, fanned out from one database reader per job and process.

However many clients follow a job on this driver, one :class:`JobFeed` reads the job's new state, metric points and
log lines every ``SPARKTRAIN_EVENTS_POLL_S`` (0.25 s): three indexed queries (the job by primary key, points and
lines after the last ids), whatever the number of clients. It keeps the events it read, already encoded, for the
last :data:`KEPT_BATCHES` reads. A client starts (or resumes, with ``Last-Event-ID``) at its own cursor: it reads
what it missed from the database in pages, up to the feed's position, then takes the feed's encoded batches from
there. A client too slow for the kept batches falls back to the database the same way, so nobody is lost or fed
twice. The reader stops when its last client leaves or the job ends.

Because the events come from the database, not from the process that runs the job, a client can follow a job that
runs on another driver.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from typing import Any

from anyio import to_thread

from app.core.errors import NotFound
from app.services import events
from app.services.events import Cursor, JobState, Window

log = logging.getLogger("sparktrain.api.events")
KEPT_BATCHES = 512
CATCH_UP_PAGE = 2000
FEED_PAGE = 5000
ALL_KINDS = frozenset({"metrics", "log", "state", "end"})


@dataclass(frozen=True)
class Batch:
    seq: int
    start: Cursor
    end: Cursor
    events: list[tuple[str, bytes]]
    final: bool


class JobFeed:
    """One job's events as this process reads them; shared by every client of the job here."""

    def __init__(self, hub: EventHub, job_id: str) -> None:
        self.hub, self.job_id = hub, job_id
        self.clients = 0
        self.head: Cursor | None = None
        self.head_state: JobState | None = None
        self.ended = False
        self.batches: deque[Batch] = deque(maxlen=KEPT_BATCHES)
        self.next_seq = 0
        self.reads = 0
        self._signal = asyncio.Event()
        self._ready = asyncio.Event()
        self._failure: BaseException | None = None
        self.task: asyncio.Task[None] | None = None

    async def ready(self) -> None:
        await self._ready.wait()
        if self._failure is not None:
            raise self._failure

    async def changed(self, seen_seq: int) -> None:
        """Return once a batch after ``seen_seq`` exists or the feed ended."""
        if self.next_seq <= seen_seq + 1 and not self.ended:
            await self._signal.wait()

    def batch(self, seq: int) -> Batch | None:
        if not self.batches or seq < self.batches[0].seq or seq >= self.next_seq:
            return None
        return self.batches[seq - self.batches[0].seq]

    def _publish(self, batch: Batch) -> None:
        self.batches.append(batch)
        self.next_seq += 1
        signal, self._signal = self._signal, asyncio.Event()
        signal.set()

    async def run(self) -> None:
        try:
            await self._start()
        except BaseException as exc:
            self._failure = exc
            self._ready.set()
            raise
        self._ready.set()
        while not self.ended:
            await asyncio.sleep(self.hub.poll_s())
            try:
                await self._poll()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reading the events of job %s failed; retrying", self.job_id)

    async def _start(self) -> None:
        def first() -> tuple[JobState | None, tuple[int, int]]:
            with self.hub.session() as session:
                state = events.read_state(session=session, job_id=self.job_id)
                return state, events.head(session=session, job_id=self.job_id)

        state, (metric, line) = await to_thread.run_sync(first)
        self.reads += 1
        if state is None:
            raise NotFound(f"No job with id {self.job_id!r}.")
        self.head, self.head_state, self.ended = Cursor(metric, line, state.fingerprint), state, state.ended

    async def _poll(self) -> None:
        assert self.head is not None
        start = self.head

        def read() -> Window:
            with self.hub.session() as session:
                return events.read_window(session=session, job_id=self.job_id, after=start, limit=FEED_PAGE)

        window = await to_thread.run_sync(read)
        self.reads += 1
        gone = window.state is None
        final = gone or (window.state is not None and window.state.ended and not window.more)
        encoded, end = events.render(window, start, state=window.state or self.head_state, final=final)
        if window.state is not None:
            self.head_state = window.state
        self.head, self.ended = end, final
        if encoded:
            self._publish(Batch(self.next_seq, start, end, encoded, final))


class EventHub:
    """The feeds of this process, one per followed job; lives as long as the app."""

    def __init__(self, runtime: Callable[[], Any]) -> None:
        """``runtime()`` is the app's ServiceRuntime (its database and settings), once it has started."""
        self.runtime = runtime
        self.feeds: dict[str, JobFeed] = {}

    def _join(self, job_id: str) -> JobFeed:
        feed = self.feeds.get(job_id)
        if feed is None:
            feed = self.feeds[job_id] = JobFeed(self, job_id)
            feed.task = asyncio.get_running_loop().create_task(feed.run(), name=f"events-{job_id}")
            feed.task.add_done_callback(_quiet)
        feed.clients += 1
        return feed

    def _leave(self, feed: JobFeed) -> None:
        feed.clients -= 1
        if feed.clients <= 0 and self.feeds.get(feed.job_id) is feed:
            del self.feeds[feed.job_id]
            if feed.task is not None:
                feed.task.cancel()

    def session(self) -> Any:
        return self.runtime().db()

    def poll_s(self) -> float:
        return float(self.runtime().settings.events_poll_s)

    @property
    def clients(self) -> int:
        return sum(f.clients for f in self.feeds.values())

    async def close(self) -> None:
        for feed in list(self.feeds.values()):
            if feed.task is not None:
                feed.task.cancel()
        self.feeds.clear()

    async def stream(self, job_id: str, *, after: Cursor, kinds: Collection[str] = ALL_KINDS) -> AsyncIterator[bytes]:
        """The job's events after ``after``, encoded, until the job ends. ``after`` must not be ahead of the job's
        newest ids in the database (the route checks)."""
        feed = self._join(job_id)
        try:
            await feed.ready()
            cursor, seq = after, -1
            while True:
                if seq < 0:  # what the feed does not hold (any more), from the database, up to the feed's position
                    assert feed.head is not None and feed.head_state is not None
                    target, target_seq, target_state, ended = feed.head, feed.next_seq, feed.head_state, feed.ended
                    if cursor.metric > target.metric or cursor.log > target.log:
                        await asyncio.sleep(self.poll_s())  # a cursor from another driver's feed, further along
                        continue
                    if cursor != target:
                        chunk, cursor = await self._catch_up(job_id, cursor, target, target_state)
                        if chunk:
                            yield _only(chunk, kinds)
                        if cursor != target:
                            continue  # another page
                    if ended:
                        yield _only(events.render(_EMPTY, cursor, state=target_state, final=True)[0], kinds)
                        return
                    seq = target_seq
                batch = feed.batch(seq)
                if batch is None:
                    if feed.batches and seq < feed.batches[0].seq:
                        seq = -1  # fell behind what the feed keeps
                    elif feed.ended:
                        seq = -1  # ended with nothing after this client's position: close from there
                    else:
                        await feed.changed(seq - 1)
                    continue
                body = _only(batch.events, kinds)
                if body:
                    yield body
                cursor, seq = batch.end, seq + 1
                if batch.final:
                    return
        finally:
            self._leave(feed)

    async def _catch_up(
        self, job_id: str, cursor: Cursor, target: Cursor, state: JobState | None
    ) -> tuple[list[tuple[str, bytes]], Cursor]:
        def read() -> Window:
            with self.session() as session:
                return events.read_window(
                    session=session, job_id=job_id, after=cursor, upto=target, limit=CATCH_UP_PAGE
                )

        window = await to_thread.run_sync(read)
        if window.more:  # the state only once the points and lines up to the target are out
            return events.render(Window(None, window.metrics, window.logs, True), cursor)
        return events.render(window, cursor, state=state)


_EMPTY = Window(state=None, metrics=[], logs=[], more=False)


def _only(encoded: list[tuple[str, bytes]], kinds: Collection[str]) -> bytes:
    return b"".join(data for kind, data in encoded if kind in kinds)


def _quiet(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        exc = task.exception()
        if not isinstance(exc, NotFound):
            log.error("the event feed %s stopped: %r", task.get_name(), exc)
