# The sparktrain driver (API + in-process Celery consumer + SparkSession) on CPU: the default docker-compose service
# (Spark local[*] inside it). The same image runs the CPU Spark standalone master and workers of the compose profile
# "cluster" (commands sparktrain-master and sparktrain-worker), so that driver and executors there are one
# environment. The CUDA images are base-cuda.Dockerfile, driver-cuda.Dockerfile and spark-worker.Dockerfile
# (docker/README.md).
#
#   docker build -f docker/driver.Dockerfile -t sparktrain-driver .

# Gradient sharing's C codec loops (workers/codecs/native.py), built in a stage of their own so that the image needs
# no compiler; the executors find the build under SPARKTRAIN_NATIVE_CACHE (its name is the hash of the source).
FROM python:3.11-slim-bookworm AS codec
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc=4:12.* libc6-dev=2.36* \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /build
COPY workers/codecs/native.py workers/codecs/threshold_native.c ./
RUN SPARKTRAIN_NATIVE_CACHE=/opt/sparktrain-native python -c "import native, sys; sys.exit(native.library() is None)"

FROM python:3.11-slim-bookworm

COPY --from=codec /opt/sparktrain-native /opt/sparktrain-native
ENV SPARKTRAIN_NATIVE_CACHE=/opt/sparktrain-native
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless=17.* curl=7.* \
 && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 1001 sparktrain
WORKDIR /srv/sparktrain

COPY pyproject.toml README.md ./
COPY app ./app
COPY workers ./workers
# torch from PyTorch's CPU index (torch==X+cpu) and xgboost-cpu, as pyproject.toml pins them.
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu . \
 && mkdir -p var/data var/artifacts /srv/spark-recovery && chown -R sparktrain var /srv/spark-recovery

COPY spark-conf ./spark-conf
COPY datasets ./datasets
# Entrypoint (SPARK_LOCAL_IP=auto for cluster processes), master/worker launchers and the health check.
COPY docker/container-net.sh docker/entrypoint.sh docker/master-entrypoint.sh docker/worker-entrypoint.sh \
     docker/healthcheck.sh /usr/local/lib/sparktrain/
RUN chmod 0755 /usr/local/lib/sparktrain/*.sh \
 && ln -s /usr/local/lib/sparktrain/entrypoint.sh /usr/local/bin/sparktrain-entrypoint \
 && ln -s /usr/local/lib/sparktrain/master-entrypoint.sh /usr/local/bin/sparktrain-master \
 && ln -s /usr/local/lib/sparktrain/worker-entrypoint.sh /usr/local/bin/sparktrain-worker \
 && ln -s /usr/local/lib/sparktrain/healthcheck.sh /usr/local/bin/sparktrain-healthcheck

USER sparktrain
# Spark on loopback for local[*]; cluster processes set SPARK_LOCAL_IP=auto (docker-compose.yml, profile cluster).
ENV SPARKTRAIN_HOST=0.0.0.0 SPARK_LOCAL_IP=127.0.0.1
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s CMD ["sparktrain-healthcheck", "driver"]
ENTRYPOINT ["sparktrain-entrypoint"]
CMD ["python", "-m", "app"]
