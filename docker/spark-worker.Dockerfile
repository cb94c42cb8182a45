# syntax=docker/dockerfile:1
# A Spark standalone worker with NVIDIA GPUs (docker/README.md): the CUDA base (base-cuda.Dockerfile: CUDA, JDK 17,
# the project's Python environment, spark-conf/ with the GPU discovery script) running pyspark's
# bin/spark-class org.apache.spark.deploy.worker.Worker through worker-entrypoint.sh, which takes the master URL,
# cores, memory and GPU count from the environment and sets SPARK_WORKER_OPTS to
# -Dspark.worker.resource.gpu.amount=N -Dspark.worker.resource.gpu.discoveryScript=.../getGpusResources.sh.
#
#   docker build -f docker/base-cuda.Dockerfile -t sparktrain-base-cuda .
#   docker build -f docker/spark-worker.Dockerfile -t sparktrain-worker-cuda [--build-arg RAPIDS_VERSION=X.Y.Z] .
#   docker run --gpus all --init --shm-size=2g -e SPARK_MASTER_URL=spark://MASTER:7077 sparktrain-worker-cuda
#
# The same image runs a master with the command sparktrain-master. BASE_IMAGE may name another base with the same
# layout (the CPU driver image, for CPU workers outside compose).
ARG BASE_IMAGE=sparktrain-base-cuda
FROM ${BASE_IMAGE}

# The RAPIDS Accelerator jar, off by default: set RAPIDS_VERSION to a release that supports the image's Spark version
# (pyspark 4.3.0; Spark 4.x takes the Scala 2.13 jar) after checking its release notes. The driver image must get
# the same jar (driver-cuda.Dockerfile takes the same build args).
ARG RAPIDS_VERSION=
ARG RAPIDS_SCALA_VERSION=2.13
ARG RAPIDS_CLASSIFIER=
ARG RAPIDS_SHA256=
USER root
RUN RAPIDS_VERSION="${RAPIDS_VERSION}" RAPIDS_SCALA_VERSION="${RAPIDS_SCALA_VERSION}" \
    RAPIDS_CLASSIFIER="${RAPIDS_CLASSIFIER}" RAPIDS_SHA256="${RAPIDS_SHA256}" \
    /usr/local/lib/sparktrain/fetch-rapids-jar.sh \
 && mkdir -p /srv/spark-recovery && chown sparktrain /srv/spark-recovery
USER sparktrain

# SPARK_LOCAL_IP=auto: bind to and advertise this container's address (container-net.sh), not spark-env.sh's
# loopback default. NCCL: use the container's network interface, not loopback or a docker bridge; NCCL_DEBUG=INFO
# when a torch or xgboost job hangs at NCCL set-up (the article's setting, noisy).
ENV SPARK_LOCAL_IP=auto \
    SPARK_MASTER_URL=spark://spark-master:7077 \
    SPARK_WORKER_GPUS=auto \
    SPARK_WORKER_WEBUI_PORT=8081 \
    NCCL_SOCKET_IFNAME=^lo,docker \
    NCCL_DEBUG=WARN
EXPOSE 8081
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s CMD ["sparktrain-healthcheck", "worker"]
ENTRYPOINT ["sparktrain-entrypoint"]
CMD ["sparktrain-worker"]
