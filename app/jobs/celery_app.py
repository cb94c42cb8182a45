"""The Celery app factory and the job tasks.

Tasks are thin (Celery's guide): they take a job id and hand it to :func:`app.jobs.runner.run_job` with the
process's :class:`~app.jobs.runtime.JobRuntime`, which the process attaches to the app before consuming.
"""

from __future__ import annotations

import json
import logging
import time
import warnings
from queue import Empty
from typing import Any

from celery import Celery, Task
from celery.exceptions import CPendingDeprecationWarning, Reject
from kombu.transport import sqlalchemy as sqla_transport
from kombu.utils.encoding import bytes_to_str
from sqlalchemy import select, text
from sqlalchemy.exc import SQLAlchemyError

from app.core.logging import job_scope
from app.core.settings import Settings
from app.jobs.lost_messages import is_redis
from app.jobs.runtime import DriverStopping, JobRuntime
from app.spark.session import spark_alive
from workers.families import FRAMEWORKS, task_name

RUNTIME_ATTR = "sparktrain_runtime"
log = logging.getLogger("sparktrain.jobs")


def runtime_of(app: Celery) -> JobRuntime:
    rt = getattr(app, RUNTIME_ATTR, None)
    if rt is None:
        raise RuntimeError("this Celery app has no JobRuntime attached: start it through app.main or app.jobs.worker")
    return rt


def attach_runtime(app: Celery, rt: JobRuntime) -> None:
    setattr(app, RUNTIME_ATTR, rt)


class EmbeddedChannel(sqla_transport.Channel):
    """kombu's SQLAlchemy channel, with acknowledged messages deleted.

    kombu hides a message when a consumer takes it (``visible = 0``) and does nothing at the broker when it is
    acknowledged, rejected or handed back: every message ever sent stays in the table, hidden, and a hidden one
    that was acknowledged cannot be told from one whose consumer died before its ack. Here each delivery notes the
    row it came from (``_get``), and the row is deleted once its message is acknowledged, rejected or put back (a
    requeue, the restore of a closing channel, which writes a copy first, under a delivery tag of its own). A
    hidden row is then a message taken and never finished with: :func:`restore_unacked_embedded` brings it back.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._rows: dict[str, int] = {}  # delivery tag -> its row; set by the consuming thread, popped by any
        super().__init__(*args, **kwargs)

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        # kombu 5's Channel._get, plus the row's id
        obj = self._get_or_create(queue)
        if self.session.bind.name == "sqlite":
            self.session.execute(text("BEGIN IMMEDIATE TRANSACTION"))
        try:
            msg = (
                self.session.query(self.message_cls)
                .with_for_update()
                .filter(self.message_cls.queue_id == obj.id)
                .filter(self.message_cls.visible != False)  # noqa: E712 (a SQL expression)
                .order_by(self.message_cls.sent_at)
                .order_by(self.message_cls.id)
                .limit(1)
                .first()
            )
            if msg is None:
                raise Empty()
            msg.visible = False
            row, payload = msg.id, json.loads(bytes_to_str(msg.payload))
        finally:
            self.session.commit()
        self._rows[payload["properties"]["delivery_tag"]] = row
        return payload

    def basic_ack(self, delivery_tag: str, multiple: bool = False) -> None:
        super().basic_ack(delivery_tag, multiple=multiple)
        self._delete_row(delivery_tag)

    def basic_reject(self, delivery_tag: str, requeue: bool = False) -> None:
        super().basic_reject(delivery_tag, requeue=requeue)  # a requeue writes the copy first (_restore)
        self._delete_row(delivery_tag)

    def _restore(self, message: Any) -> None:
        raw = message.serializable()
        # a tag of its own: the copy may be taken (and its row noted) before the original's row is deleted
        raw["properties"] = {**raw["properties"], "delivery_tag": self._next_delivery_tag()}
        raw["redelivered"] = True
        info = message.delivery_info
        # The copy is written on a connection of its own, as kombu's _put would write it: a requeue (a stopping
        # driver's Reject) comes from a pool thread, and _put used the channel's session, which the consuming thread
        # was using at that moment (concurrent requeues failed with "database is locked", "This session is in
        # 'prepared' state", and a message was lost)
        engine, _ = self._open()
        queues, messages = self.queue_cls.__table__, self.message_cls.__table__
        with engine.begin() as conn:
            for queue in self._lookup(info["exchange"], info["routing_key"]):
                queue_id = conn.execute(select(queues.c.id).where(queues.c.name == queue)).scalar_one()
                conn.execute(messages.insert().values(payload=json.dumps(raw), queue_id=queue_id))
        self._delete_row(message.delivery_tag)

    def _delete_row(self, delivery_tag: str) -> None:
        """Delete the row of a message this channel is done with, on a connection of its own (acks come from the
        pool's threads; the channel's session belongs to the consuming thread). A row that stays (the database was
        locked past its timeout) comes back at the next start and is dropped by the job's state guard."""
        row = self._rows.pop(delivery_tag, None)
        if row is None:
            return
        engine, _ = self._open()
        table = self.message_cls.__table__
        try:
            with engine.begin() as conn:
                conn.execute(table.delete().where(table.c.id == row))
        except SQLAlchemyError as exc:
            log.warning("the broker kept finished message %s (%s): it comes back at the next start, ignored", row, exc)


def _configure_embedded_broker(settings: Settings) -> None:
    """kombu's SQLAlchemy transport polls once a second; its transport options go to create_engine (a
    ``polling_interval`` there raises), so the class attribute is the one knob. Its channel becomes
    :class:`EmbeddedChannel` (``broker_transport`` cannot name a class for a ``sqla+`` URL: kombu takes the
    transport from the URL's prefix)."""
    if settings.broker_url.startswith(("sqla+", "sqlalchemy+")):
        sqla_transport.Transport.polling_interval = settings.broker_poll_interval_s
        sqla_transport.Transport.Channel = EmbeddedChannel
        db = settings.broker_url.removeprefix("sqla+sqlite:///")
        if db != settings.broker_url:
            from pathlib import Path

            Path(db).parent.mkdir(parents=True, exist_ok=True)


def restore_unacked_embedded(broker_url: str) -> int:
    """Make the embedded SQLite broker's taken-but-unacknowledged messages visible again.

    A message a consumer takes is hidden (``visible = 0``), and :class:`EmbeddedChannel` deletes its row once it is
    acknowledged, rejected or put back; a consumer killed in between (kill -9, power loss) leaves it hidden for
    ever. The embedded broker belongs to one driver, so at that driver's start nothing else can hold a message:
    every hidden one is an orphan. Jobs the messages name that already started are dropped by the QUEUED ->
    STARTING guard (so are, once, the acknowledged messages a broker file from before deletion kept hidden: their
    rows go with their ack). Returns how many came back.
    """
    if not broker_url.startswith("sqla+sqlite:///"):
        return 0
    import sqlite3
    from pathlib import Path

    path = Path(broker_url.removeprefix("sqla+sqlite:///"))
    if not path.exists():
        return 0
    with sqlite3.connect(path, timeout=30) as conn:
        try:
            return conn.execute("UPDATE kombu_message SET visible = 1 WHERE visible = 0").rowcount
        except sqlite3.OperationalError:  # no table yet: the broker was never used
            return 0


def create_celery(settings: Settings) -> Celery:
    _configure_embedded_broker(settings)
    # worker_cancel_long_running_tasks_on_connection_loss is False on purpose (a broker restart must not kill the
    # running trainings), and Celery warns about it on every reconnect; under an "error" warnings filter that warning
    # kills the consumer at the reconnect it announces
    warnings.filterwarnings("ignore", category=CPendingDeprecationWarning, message=r"(?s).*on connection loss cancels")
    app = Celery("sparktrain", set_as_current=False)
    transport_options: dict[str, Any] = {}
    transport: str | None = None
    if is_redis(settings.broker_url):
        # Redelivery of an unacked message after this long: longer than any job (Celery's Redis caveat).
        transport_options["visibility_timeout"] = settings.visibility_timeout_s
    if settings.broker_url.startswith("redis://"):
        from app.jobs.redis_transport import TRANSPORT

        transport = TRANSPORT  # an acknowledgement Redis missed frees its prefetch slot all the same
    app.conf.update(
        broker_url=settings.broker_url,
        broker_transport_options=transport_options,
        broker_transport=transport,
        broker_connection_retry_on_startup=True,
        result_backend=None,
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_default_queue=settings.queue,
        task_serializer="json",
        accept_content=["json"],
        worker_pool="threads",
        worker_concurrency=settings.consumer_concurrency,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        worker_send_task_events=False,
        worker_enable_remote_control=False,
        worker_cancel_long_running_tasks_on_connection_loss=False,
        timezone="UTC",
    )
    register_tasks(app)
    return app


def send_job(app: Celery, task: str, job_id: str, queue: str) -> None:
    """Send a job's message (the job id) by task name on ``queue``; raises if the broker does not take it within
    a few seconds."""
    app.send_task(
        task,
        args=[job_id],
        queue=queue,
        retry=True,
        retry_policy={"max_retries": 2, "interval_start": 0.2, "interval_step": 0.5},
    )


def register_tasks(app: Celery) -> None:
    def run(self: Task, job_id: str) -> None:
        from app.jobs.runner import run_job

        rt = runtime_of(app)
        if rt.stopping:  # a stopping driver takes nothing more: the message goes back for another driver
            raise Reject(f"driver {rt.worker_id} is stopping", requeue=True)
        if not spark_alive(rt.spark):  # its JVM died: ``python -m app`` stops within seconds (app/__main__.py)
            # the death itself is logged once, at ERROR, by the driver's probe (SPARK_LOST_LOG)
            log.info("job %s goes back to the queue: Spark's JVM on driver %s is gone", job_id, rt.worker_id)
            time.sleep(1.0)  # a consumer with no such stop (an external Celery worker) must not spin on the message
            raise Reject(f"driver {rt.worker_id} lost its SparkSession", requeue=True)
        routing = (self.request.delivery_info or {}).get("routing_key")

        def send(task: str, retried: str, queue: str) -> None:
            send_job(app, task, retried, queue)

        with job_scope(job_id):
            try:
                run_job(rt, job_id, queue=str(routing or rt.settings.queue), send=send)
            except DriverStopping as exc:  # it began to stop since the check above
                raise Reject(str(exc), requeue=True) from None

    options = {"bind": True, "shared": False, "acks_late": True, "reject_on_worker_lost": True, "ignore_result": True}
    for framework in FRAMEWORKS:
        app.task(name=task_name("train", framework), **options)(run)
    for job_type in ("evaluate", "predict", "recipe", "tune"):
        app.task(name=task_name(job_type, ""), **options)(run)
