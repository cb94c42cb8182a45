"""The driver's one SparkSession, built at start-up and kept for the life of the process."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from app.core.settings import Settings
from app.spark.jvm_watch import watch_jvm_death
from app.spark.profile import merge_conf, read_conf_file, recorded_keys, resolve_profile

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def prepare_spark_environment(settings: Settings) -> None:
    """Environment the JVM launcher reads: must be in place before the first SparkSession of the process."""
    os.environ["SPARK_CONF_DIR"] = str(settings.spark_conf_dir)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    _py4j_connections_block()


def _py4j_connections_block() -> None:
    """py4j opens a connection to the JVM per thread, and its socket takes the process's default timeout. kombu's
    ``Connection.collect`` sets that default to 0.1 s for a moment (kombu/connection.py, when a pool closes its
    connections); a py4j connection opened by another thread in that moment kept it, and every Spark call on it
    longer than 0.1 s failed (``Py4JError: An error occurred while calling o403.load``: the test suite saw a job
    fail so). The connection's socket is set to block, as py4j means it to when it has no read timeout."""
    from py4j.clientserver import ClientServerConnection

    connect = ClientServerConnection.connect_to_java_server
    if getattr(connect, "blocking", False):
        return

    def connect_blocking(self: ClientServerConnection) -> None:
        connect(self)
        if not self.java_parameters.read_timeout and self.socket is not None:
            self.socket.settimeout(None)

    connect_blocking.blocking = True  # type: ignore[attr-defined]
    ClientServerConnection.connect_to_java_server = connect_blocking


def build_spark_session(settings: Settings) -> SparkSession:
    """Start (or join) this process's SparkSession with ``spark-defaults.conf``, then the selected profile
    (``spark-conf/<profile>.conf``, see :mod:`app.spark.profile`), then ``settings.spark_conf``."""
    from pyspark.sql import SparkSession

    prepare_spark_environment(settings)
    profile = resolve_profile(settings)
    scratch = settings.var_dir / "spark"
    scratch.mkdir(parents=True, exist_ok=True)
    builder = (
        SparkSession.builder.master(settings.spark_master)
        .appName(settings.spark_app_name)
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
    )
    conf = merge_conf(profile.conf, settings.spark_conf) | recorded_keys(profile)
    conf[DRIVER_JAVA_OPTIONS] = driver_java_options(
        settings.spark_conf_dir, scratch, conf, json_logs=settings.log_format == "json"
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = _start(builder, settings.spark_local_nice if settings.spark_master.startswith("local") else 0)
    watch_jvm_death()  # its death is told in one line, not in py4j's tracebacks
    spark.sparkContext.setLogLevel("WARN")
    if not str(spark.sparkContext.master).startswith("local"):
        ship_executor_code(spark, scratch)
    log.info(
        "SparkSession ready: master=%s app=%s profile=%s RAPIDS plugin %s",
        spark.sparkContext.master,
        spark.sparkContext.applicationId,
        profile.name or "-",
        "on" if profile.plugin else "off",
    )
    return spark


def _start(builder: SparkSession.Builder, nice: int) -> SparkSession:
    """``builder.getOrCreate()``; with ``nice`` > 0, from a thread of its own at that niceness.

    Linux keeps a niceness per thread and a child process starts with its parent thread's: the JVM launched from
    that thread, its threads and the Python workers it forks (every executor-side task of a local master) run at
    ``nice`` while the API's threads stay at 0. On a 2-core machine shared by the API, PostgreSQL and training
    this is what keeps request latency low while jobs train (``bench.load``); the training itself loses nothing
    when the cores are otherwise idle. A JVM that is running already (a session built before) keeps its niceness."""
    if nice <= 0:
        return builder.getOrCreate()
    import threading

    built: list[SparkSession] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            me = threading.get_native_id()  # this thread only; a niceness is never lowered (that needs privileges)
            os.setpriority(os.PRIO_PROCESS, me, max(nice, os.getpriority(os.PRIO_PROCESS, me)))
            built.append(builder.getOrCreate())
        except BaseException as exc:  # handed to the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, name="spark-start")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return built[0]


DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"

JOB_ID_MDC = "mdc.job_id"
"""The log4j MDC key of the running job's id on Spark's JVM lines (``job_id`` in ``log4j2-json.properties``,
``[job <id>]`` in ``log4j2.properties``); see :func:`tag_job_logs`."""


def tag_job_logs(spark: SparkSession, job_id: str | None) -> None:
    """Make the JVM lines of ``job_id``'s work carry it, from the thread that runs the job (None: stop). Two ways in:
    the SparkContext local property ``mdc.job_id`` of this thread, next to its job group, which Spark copies into the
    MDC of every executor thread that runs a task of its Spark jobs (``Executor.setMDCForTask``); and the MDC of the
    JVM thread that serves this Python thread (pinned thread mode: one JVM thread per Python thread), for the lines
    Spark logs while this thread calls it ("Starting job: ..."). The scheduler's own threads (DAGScheduler's event
    loop, the task-result getters) have neither, nor have threads the job starts itself, but for the local property
    that pyspark's ``InheritableThread`` passes on (docs/configuration.md#which-spark-lines-carry-a-job_id)."""
    from py4j.clientserver import ClientServer

    sc = spark.sparkContext
    sc._jsc.setLocalProperty(JOB_ID_MDC, job_id)  # None removes it
    jvm = sc._jvm
    if jvm is None or not isinstance(sc._gateway, ClientServer):  # no pinned threads: any JVM thread may serve a call
        return
    context = jvm.org.apache.logging.log4j.ThreadContext
    if job_id is None:
        context.remove(JOB_ID_MDC)
    else:
        context.put(JOB_ID_MDC, job_id)


JSON_LOG4J = "log4j2-json.properties"
"""With ``SPARKTRAIN_LOG_FORMAT=json``, read after ``log4j2.properties``: Spark's own log lines as JSON objects."""


def driver_java_options(conf_dir: Path, scratch: Path, conf: Mapping[str, str], *, json_logs: bool = False) -> str:
    """The driver JVM's options: ``spark-defaults.conf``'s, then Derby's home in the scratch directory (its log and
    metastore stay out of the working directory), then, for JSON logs, log4j's configuration (``log4j2.properties``
    and :data:`JSON_LOG4J` over it, when the directory has it), then the profile's or the operator's. The builder's
    value would replace the file's rather than add to it (spark-submit reads a defaults key only when not given), so
    they are joined here; a later option wins where two set the same JVM flag."""
    defaults = conf_dir / "spark-defaults.conf"
    from_file = read_conf_file(defaults).get(DRIVER_JAVA_OPTIONS, "") if defaults.is_file() else ""
    log4j = ""
    if json_logs and (conf_dir / JSON_LOG4J).is_file():
        files = [conf_dir / name for name in ("log4j2.properties", JSON_LOG4J) if (conf_dir / name).is_file()]
        log4j = "-Dlog4j2.configurationFile=" + ",".join(map(str, files))
    parts = (from_file, f"-Dderby.system.home={scratch}", log4j, conf.get(DRIVER_JAVA_OPTIONS, ""))
    return " ".join(part.strip() for part in parts if part.strip())


EXECUTOR_PACKAGES = ("workers",)
"""What executors import of ours: executor-side code lives in ``workers`` and imports no ``app``."""


def ship_executor_code(spark: SparkSession, scratch: Path) -> Path:
    """Zip the executor-side packages and add them to every executor's Python path (``SparkContext.addPyFile``):
    executors need nothing of sparktrain installed, only its third-party libraries (which the environment
    check compares with the driver's). The zip is rebuilt at every start, so executors run the driver's code."""
    import zipfile

    root = Path(__file__).resolve().parents[2]
    target = scratch / "sparktrain-executor.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in EXECUTOR_PACKAGES:
            for path in sorted([*(root / package).rglob("*.py"), *(root / package).rglob("*.c")]):
                archive.write(path, path.relative_to(root).as_posix())  # .c: the codec's loops (native.py)
    spark.sparkContext.addPyFile(str(target))
    log.info("executor code shipped: %s (%s)", target, ", ".join(EXECUTOR_PACKAGES))
    return target


SPARK_LOST_EXIT = 4
"""The exit status of a driver process (``python -m app``, ``celery -A app.jobs.worker worker``) that stopped
because Spark's JVM died under it: a supervisor's ``restart: on-failure`` starts it again with a new JVM."""
SPARK_PROBE_S = 5.0
"""How often a driver process asks whether its JVM still answers."""
SPARK_LOST_LOG = (
    f"Spark's JVM is gone (killed, or out of memory): this %s can run no job, so its jobs go back to the queue and "
    f"it stops and exits with status {SPARK_LOST_EXIT}, for its supervisor to start it again with a new JVM"
)
"""What a driver process logs (``%s``: driver or worker) when its probe finds the JVM gone: the one line that tells
of the death (py4j's own complaints about it are dropped, app/spark/jvm_watch.py)."""


def spark_alive(spark: SparkSession) -> bool:
    """True while the JVM answers and the SparkContext is not stopped (no Spark job is launched)."""
    try:
        return not spark.sparkContext._jsc.sc().isStopped()
    except Exception:
        return False
