# syntax=docker/dockerfile:1
# The CUDA base of the GPU images (docker/README.md): CUDA 12 runtime + cuDNN on Ubuntu 22.04, OpenJDK 17 (pyspark 4.3
# needs 17+), Python 3.11 in /opt/venv with the project's dependencies read from its own pyproject.toml, and the
# project under /srv/sparktrain, run by the non-root user sparktrain (uid 1001, as in driver.Dockerfile).
#
# The two substitutions the CPU pins call for (cuda-requirements.py): torch is the CUDA build of pyproject's version
# (torch==X+cu126 from PyTorch's CUDA 12.6 index), and xgboost-cpu==Y becomes plain xgboost==Y (PyPI's CUDA 12
# build; never both). The CUDA driver (driver-cuda.Dockerfile) and the CUDA workers (spark-worker.Dockerfile) are
# built FROM this image, so they share one environment: the driver's executor environment check compares Python,
# pyspark, torch or xgboost, pyarrow and numpy with the executors' and fails a job on any difference (pandas and the
# other libraries are not compared, so they too must come from this one build).
#
#   docker build -f docker/base-cuda.Dockerfile -t sparktrain-base-cuda .
#
# CUDA libraries: torch and xgboost load the CUDA, cuDNN and NCCL libraries of their own nvidia-*-cu12 wheels (one
# NCCL for both: torch pins nvidia-nccl-cu12); the base image adds the CUDA runtime for everything else (the RAPIDS
# jar's native code) and the NVIDIA_* variables the NVIDIA container toolkit reads. The host needs an NVIDIA driver
# for CUDA 12 and the NVIDIA container toolkit; the image itself builds on any machine.
ARG CUDA_IMAGE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu22.04
FROM ${CUDA_IMAGE}

# PyTorch 2.13 builds for CUDA 12.6 (cu126) and 13.x; CUDA 12 images use cu126. Check the index for the torch version
# pyproject.toml pins when either changes.
ARG TORCH_CUDA=cu126
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/${TORCH_CUDA}
ARG DEBIAN_FRONTEND=noninteractive
# The deadsnakes PPA's signing key (Python 3.11 for Ubuntu 22.04); the build fails if the fetched key differs.
ARG DEADSNAKES_KEY=F23C5A6CF475977595C89F51BA6932366A755776

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates=2* curl=7.* gnupg=2.* \
 && install -d -m 0755 /etc/apt/keyrings \
 && curl -fsSL "https://keyserver.ubuntu.com/pks/lookup?op=get&search=0x${DEADSNAKES_KEY}" \
    | gpg --batch --dearmor -o /etc/apt/keyrings/deadsnakes.gpg \
 && gpg --batch --show-keys --with-colons /etc/apt/keyrings/deadsnakes.gpg | grep -q "^fpr:*${DEADSNAKES_KEY}:" \
 && . /etc/os-release \
 && echo "deb [signed-by=/etc/apt/keyrings/deadsnakes.gpg] https://ppa.launchpadcontent.net/deadsnakes/ppa/ubuntu ${VERSION_CODENAME} main" \
    > /etc/apt/sources.list.d/deadsnakes.list \
 && apt-get update \
 && mkdir -p /usr/share/man/man1 \
 && apt-get install -y --no-install-recommends \
    openjdk-17-jre-headless=17.* python3.11=3.11.* python3.11-venv=3.11.* \
 && apt-get purge -y --auto-remove gnupg \
 && rm -rf /var/lib/apt/lists/*

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    LANG=C.UTF-8
RUN python3.11 -m venv /opt/venv \
 && useradd --create-home --uid 1001 sparktrain
WORKDIR /srv/sparktrain

# Dependencies first (cached until pyproject.toml changes), then the project.
COPY pyproject.toml README.md ./
COPY docker/cuda-requirements.py /usr/local/lib/sparktrain/cuda-requirements.py
RUN python /usr/local/lib/sparktrain/cuda-requirements.py pyproject.toml --torch-local "${TORCH_CUDA}" \
      > /usr/local/lib/sparktrain/requirements-cuda.txt \
 && pip install --index-url "${TORCH_INDEX_URL}" "$(grep '^torch==' /usr/local/lib/sparktrain/requirements-cuda.txt)" \
 && pip install -r /usr/local/lib/sparktrain/requirements-cuda.txt

COPY app ./app
COPY workers ./workers
RUN pip install --no-deps . \
 && python /usr/local/lib/sparktrain/cuda-requirements.py pyproject.toml --torch-local "${TORCH_CUDA}" --check

COPY spark-conf ./spark-conf
COPY datasets ./datasets
COPY docker/container-net.sh docker/entrypoint.sh docker/master-entrypoint.sh docker/worker-entrypoint.sh \
     docker/healthcheck.sh docker/fetch-rapids-jar.sh /usr/local/lib/sparktrain/
RUN chmod 0755 /usr/local/lib/sparktrain/*.sh \
 && ln -s /usr/local/lib/sparktrain/entrypoint.sh /usr/local/bin/sparktrain-entrypoint \
 && ln -s /usr/local/lib/sparktrain/master-entrypoint.sh /usr/local/bin/sparktrain-master \
 && ln -s /usr/local/lib/sparktrain/worker-entrypoint.sh /usr/local/bin/sparktrain-worker \
 && ln -s /usr/local/lib/sparktrain/healthcheck.sh /usr/local/bin/sparktrain-healthcheck \
 && mkdir -p var/data var/artifacts /opt/sparkRapidsPlugin /srv/spark-recovery \
 && chown -R sparktrain var /srv/spark-recovery

USER sparktrain
# Executors start the Python the driver names (PYSPARK_PYTHON, sent with every task); a bare "python" is looked up
# on each executor's PATH, which is this venv here. A driver from another image (driver.Dockerfile names its
# /usr/local/bin/python) needs PYSPARK_PYTHON=python too before it can use these workers.
ENV PYSPARK_PYTHON=python
ENTRYPOINT ["sparktrain-entrypoint"]
CMD ["python", "-c", "import pyspark, torch, xgboost; print('pyspark', pyspark.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(), 'xgboost', xgboost.__version__)"]
