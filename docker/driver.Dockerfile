# The sparktrain driver (API + in-process job consumer) on CPU. The CUDA worker images come with the
# cluster work (docker/README.md).
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless=17.* curl=7.* \
 && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 1001 sparktrain
WORKDIR /srv/sparktrain

COPY pyproject.toml README.md ./
COPY app ./app
COPY workers ./workers
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu . \
 && mkdir -p var && chown sparktrain var

COPY spark-conf ./spark-conf
COPY datasets ./datasets

USER sparktrain
ENV SPARKTRAIN_HOST=0.0.0.0 SPARK_LOCAL_IP=127.0.0.1
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s CMD curl -fsS http://127.0.0.1:8000/readyz || exit 1
CMD ["python", "-m", "app"]
