# syntax=docker/dockerfile:1
# The sparktrain driver (API + in-process job consumer + SparkSession) on the CUDA base (base-cuda.Dockerfile), for a
# cluster of CUDA workers (spark-worker.Dockerfile): built FROM the same base, the driver and the executors have the
# same Python, pyspark, torch (CUDA build), xgboost (CUDA build), pyarrow, pandas and numpy. Before a torch or xgboost
# job on executors it has not checked yet the driver compares them, pandas aside, and the job's framework of torch
# and xgboost only (docs/clusters-gpus.md). The driver itself needs no GPU when its master is a cluster.
#
#   docker build -f docker/base-cuda.Dockerfile -t sparktrain-base-cuda .
#   docker build -f docker/driver-cuda.Dockerfile -t sparktrain-driver-cuda [--build-arg RAPIDS_VERSION=X.Y.Z] .
ARG BASE_IMAGE=sparktrain-base-cuda
FROM ${BASE_IMAGE}

# The same RAPIDS jar as the workers (spark-worker.Dockerfile): the gpu profile loads it from /opt/sparkRapidsPlugin,
# adds it to spark.jars (executors fetch it from the driver) and to the driver's class path.
ARG RAPIDS_VERSION=
ARG RAPIDS_SCALA_VERSION=2.13
ARG RAPIDS_CLASSIFIER=
ARG RAPIDS_SHA256=
USER root
RUN RAPIDS_VERSION="${RAPIDS_VERSION}" RAPIDS_SCALA_VERSION="${RAPIDS_SCALA_VERSION}" \
    RAPIDS_CLASSIFIER="${RAPIDS_CLASSIFIER}" RAPIDS_SHA256="${RAPIDS_SHA256}" \
    /usr/local/lib/sparktrain/fetch-rapids-jar.sh
USER sparktrain

# As driver.Dockerfile: Spark on loopback for local[*]; a cluster driver sets SPARK_LOCAL_IP=auto so that executors
# can connect back to it (docker-compose.yml, profile gpu).
ENV SPARKTRAIN_HOST=0.0.0.0 SPARK_LOCAL_IP=127.0.0.1
EXPOSE 8000 4040
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s CMD ["sparktrain-healthcheck", "driver"]
ENTRYPOINT ["sparktrain-entrypoint"]
CMD ["python", "-m", "app"]
