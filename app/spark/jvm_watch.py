"""Noticing that Spark's JVM died under the driver, and saying so once.

When the JVM dies (killed, out of memory), every call into it that is in flight or comes next finds its py4j
connection broken, and py4j logs each on the root logger with a traceback (``Exception while sending command.``,
``py4j.protocol.Py4JNetworkError: Answer from Java side is empty``): a page of tracebacks in the few seconds before
the driver's probe found the JVM gone and said so in one line (``SPARK_LOST_LOG``, app/spark/session.py).

:class:`JvmDeathFilter` drops those records once the JVM's process has exited, and marks the death, so that the
probe (app/__main__.py, app/jobs/worker.py) looks at once instead of at its next round, and its line is the one the
operator reads. While the JVM process still runs, the records are kept: a broken connection to a JVM that is alive
is a fault of its own to see. pyspark's accumulator server, which prints the traceback of its connection from the
JVM breaking, is quieted the same way.
"""

from __future__ import annotations

import logging
import os
import socketserver
import subprocess
import threading
from typing import Any

JVM_DIED = threading.Event()
"""Set when py4j's complaints showed that this process's Spark JVM exited; never cleared (the driver stops)."""
EXIT_WAIT_S = 1.0
"""How long a broken connection waits for the JVM's process to be seen as exited: the kernel closes a killed
process's sockets a moment before its parent can reap it."""


def jvm_exited(wait_s: float = 0.0) -> bool:
    """Whether the JVM this process launched (pyspark's gateway) has exited, waiting up to ``wait_s`` for it. False
    when there is no JVM of this process's own (none started yet, or one pyspark joined rather than launched)."""
    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if not isinstance(proc, subprocess.Popen):
        return False
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        return False
    return True


class JvmDeathFilter(logging.Filter):
    """On the root logger, where py4j logs a failed call (see the module)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if f"{os.sep}py4j{os.sep}" not in record.pathname or record.exc_info is None:
            return True
        error = record.exc_info[1]
        if type(error).__name__ != "Py4JNetworkError" or not jvm_exited(EXIT_WAIT_S):
            return True
        JVM_DIED.set()
        return False


def _accumulator_connection_broke(server: socketserver.BaseServer, request: Any, client_address: Any) -> None:
    """pyspark's accumulator server (the JVM sends it the tasks' accumulator updates) prints the traceback of a
    connection that broke (``EOFError``) on stderr: quiet when the JVM died, as it is then, socketserver's otherwise."""
    if jvm_exited(EXIT_WAIT_S):
        JVM_DIED.set()
        return
    socketserver.BaseServer.handle_error(server, request, client_address)


def watch_jvm_death() -> None:
    """Install :class:`JvmDeathFilter` on the root logger, and :func:`_accumulator_connection_broke` on pyspark's
    accumulator servers (once)."""
    from pyspark import accumulators

    root = logging.getLogger()
    if not any(isinstance(f, JvmDeathFilter) for f in root.filters):
        root.addFilter(JvmDeathFilter())
    for server in (accumulators.AccumulatorTCPServer, accumulators.AccumulatorUnixServer):
        server.handle_error = _accumulator_connection_broke  # type: ignore[method-assign,assignment]
