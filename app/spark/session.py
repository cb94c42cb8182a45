"""The driver's one SparkSession, built at start-up and kept for the life of the process."""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

from app.core.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def prepare_spark_environment(settings: Settings) -> None:
    """Environment the JVM launcher reads: must be in place before the first SparkSession of the process."""
    os.environ["SPARK_CONF_DIR"] = str(settings.spark_conf_dir)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def build_spark_session(settings: Settings) -> SparkSession:
    """Start (or join) this process's SparkSession with ``spark-conf/`` plus ``settings.spark_conf``."""
    from pyspark.sql import SparkSession

    prepare_spark_environment(settings)
    scratch = settings.var_dir / "spark"
    scratch.mkdir(parents=True, exist_ok=True)
    builder = (
        SparkSession.builder.master(settings.spark_master)
        .appName(settings.spark_app_name)
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={scratch}")
    )
    for key, value in settings.spark_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    log.info("SparkSession ready: master=%s app=%s", spark.sparkContext.master, spark.sparkContext.applicationId)
    return spark


def spark_alive(spark: SparkSession) -> bool:
    """True while the JVM answers and the SparkContext is not stopped (no Spark job is launched)."""
    try:
        return not spark.sparkContext._jsc.sc().isStopped()
    except Exception:
        return False
