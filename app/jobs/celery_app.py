"""The Celery app factory and the job tasks.

Tasks are thin (Celery's guide): they take a job id and hand it to :func:`app.jobs.runner.run_job` with the
process's :class:`~app.jobs.runtime.JobRuntime`, which the process attaches to the app before consuming.
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any

from celery import Celery, Task
from celery.exceptions import CPendingDeprecationWarning, Reject

from app.core.logging import job_scope
from app.core.settings import Settings
from app.jobs.lost_messages import is_redis
from app.jobs.runtime import JobRuntime
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


def _configure_embedded_broker(settings: Settings) -> None:
    """kombu's SQLAlchemy transport polls once a second; its transport options go to create_engine (a
    ``polling_interval`` there raises), so the class attribute is the one knob."""
    if settings.broker_url.startswith("sqla+"):
        from kombu.transport import sqlalchemy as sqla_transport

        sqla_transport.Transport.polling_interval = settings.broker_poll_interval_s
        db = settings.broker_url.removeprefix("sqla+sqlite:///")
        if db != settings.broker_url:
            from pathlib import Path

            Path(db).parent.mkdir(parents=True, exist_ok=True)


def restore_unacked_embedded(broker_url: str) -> int:
    """Make the embedded SQLite broker's taken-but-unacknowledged messages visible again.

    kombu's SQLAlchemy transport hides a message when a consumer takes it and deletes it on ack; a consumer
    killed in between (kill -9, power loss) leaves it hidden for ever. The embedded broker belongs to one
    driver, so at that driver's start nothing else can hold a message: every hidden one is an orphan. Jobs the
    messages name that already started are dropped by the QUEUED -> STARTING guard. Returns how many came back.
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
            log.error("job %s goes back to the queue: Spark's JVM on driver %s is gone", job_id, rt.worker_id)
            time.sleep(1.0)  # a consumer with no such stop (an external Celery worker) must not spin on the message
            raise Reject(f"driver {rt.worker_id} lost its SparkSession", requeue=True)
        routing = (self.request.delivery_info or {}).get("routing_key")

        def send(task: str, retried: str, queue: str) -> None:
            send_job(app, task, retried, queue)

        with job_scope(job_id):
            run_job(rt, job_id, queue=str(routing or rt.settings.queue), send=send)

    options = {"bind": True, "shared": False, "acks_late": True, "reject_on_worker_lost": True, "ignore_result": True}
    for framework in FRAMEWORKS:
        app.task(name=task_name("train", framework), **options)(run)
    for job_type in ("evaluate", "predict", "recipe", "tune"):
        app.task(name=task_name(job_type, ""), **options)(run)
