"""The driver's Spark log stays readable: a user's cancel of a Spark ML fit is not logged as a Java ERROR with a
50-line stack trace. Spark ML's Instrumentation logs every fit that ends with an exception at ERROR, a cancelled one
too; spark-conf/log4j2.properties sets that logger to FATAL (the job records why a fit failed). Checked here on the
JVM the session runs, through log4j's own API (the JVM's stderr is not this process's to capture): measured once by
hand, a cancelled forest fit's 50 lines of trace in the service log became none."""

from __future__ import annotations

from typing import Any


def test_spark_mls_instrumentation_logs_no_errors_and_other_loggers_still_warn(spark: Any) -> None:
    log_manager = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager
    level = log_manager.getLogger("org.apache.spark.ml.util.Instrumentation").getLevel().toString()
    assert level == "FATAL"
    assert log_manager.getLogger("org.apache.spark.scheduler.DAGScheduler").getLevel().toString() == "WARN"


def test_a_path_spark_cannot_reach_logs_no_stack_trace(spark: Any) -> None:
    """Registering s3a://bucket/x (no connector) or hdfs://nn/x (no such host) logged FileStreamSink's warning with a
    ~100-line Java stack trace per request, before the read failed (and said so to the caller): any key could fill
    the log (security walkthrough). The logger is the class that logs it (a rename would leave it in effect)."""
    jvm = spark.sparkContext._jvm
    name = "org.apache.spark.sql.execution.streaming.sinks.FileStreamSink"
    assert jvm.java.lang.Class.forName(name).getName() == name
    assert jvm.org.apache.logging.log4j.LogManager.getLogger(name).getLevel().toString() == "ERROR"
