#!/usr/bin/env bash
# Sourced by Spark's launch scripts (driver JVM, standalone master and workers).
# Bind to loopback unless told otherwise: without SPARK_LOCAL_IP the UI listens on every interface.
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
