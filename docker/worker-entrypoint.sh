#!/usr/bin/env bash
# A Spark standalone worker in the foreground (installed as /usr/local/bin/sparktrain-worker), started the way
# scripts/cluster.sh starts one: pip's pyspark has bin/spark-class but no sbin/start-worker.sh.
#
# Environment:
#   SPARK_MASTER_URL         spark://HOST:PORT of the master (default spark://spark-master:7077)
#   SPARK_WORKER_CORES       cores this worker offers to executors (default: the CPUs this container sees)
#   SPARK_WORKER_MEMORY      memory it offers to executors, e.g. 8g: the sum of executor heaps
#                            (spark.executor.memory), not the container's size; see docker/README.md (default 2g)
#   SPARK_WORKER_GPUS        auto (default): offer the GPUs the discovery script finds, and none when it finds none
#                            (a CPU worker); N: the same, but fail to start when fewer than N are found; 0: no GPU.
#                            The worker offers every GPU it sees: give the container the GPUs it should offer
#                            (docker run --gpus '"device=0"', compose device_ids)
#   SPARK_GPU_DISCOVERY_SCRIPT  default $SPARK_CONF_DIR/getGpusResources.sh (prints {"name":"gpu","addresses":[..]})
#   SPARK_WORKER_HOST        address the worker binds to and advertises; its executors use it too, so the driver
#                            and the other executors (NCCL/gloo rendezvous) must reach it (default: SPARK_LOCAL_IP)
#   SPARK_WORKER_PORT        0 (any); SPARK_WORKER_WEBUI_PORT 8081 (JSON at /json/)
#   SPARK_WORKER_DIR         executors' work directories and logs (default ~/work)
#   SPARK_WORKER_OPTS        extra -D options, appended after the GPU and clean-up options set here
#   SPARK_LOCAL_IP           auto (default) = this container's address; see container-net.sh
#   SPARK_CONF_DIR           /srv/sparktrain/spark-conf
set -euo pipefail
# shellcheck source=docker/container-net.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/container-net.sh"

fail() { echo "sparktrain-worker: $*" >&2; exit 1; }

resolve_spark_local_ip daemon
SPARK_HOME="$(spark_home)"
SPARK_CONF_DIR="$(spark_conf_dir)"
export SPARK_HOME SPARK_CONF_DIR

master="${SPARK_MASTER_URL:-spark://spark-master:7077}"
[[ "${master}" == spark://* ]] || fail "SPARK_MASTER_URL must be spark://HOST:PORT, not '${master}'"
cores="${SPARK_WORKER_CORES:-$(nproc)}"
memory="${SPARK_WORKER_MEMORY:-2g}"
host="${SPARK_WORKER_HOST:-${SPARK_LOCAL_IP}}"
port="${SPARK_WORKER_PORT:-0}"
webui="${SPARK_WORKER_WEBUI_PORT:-8081}"
work_dir="${SPARK_WORKER_DIR:-${HOME}/work}"
[[ "${cores}" =~ ^[1-9][0-9]*$ ]] || fail "SPARK_WORKER_CORES must be a positive integer, not '${cores}'"
[[ "${memory}" =~ ^[1-9][0-9]*[mMgGtT]$ ]] || fail "SPARK_WORKER_MEMORY must look like 2048m or 8g, not '${memory}'"
if [[ "${host}" == 127.* ]]; then
  echo "sparktrain-worker: warning: binding to ${host}; only a driver in this same container can use this worker" >&2
fi

# GPUs: the article's SPARK_WORKER_OPTS (spark.worker.resource.gpu.amount + discoveryScript), with the amount found here.
gpus="${SPARK_WORKER_GPUS:-auto}"
script="${SPARK_GPU_DISCOVERY_SCRIPT:-${SPARK_CONF_DIR}/getGpusResources.sh}"
gpu_opts=""
if [ "${gpus}" != "0" ]; then
  [[ "${gpus}" == "auto" || "${gpus}" =~ ^[1-9][0-9]*$ ]] || fail "SPARK_WORKER_GPUS must be auto, 0 or a count, not '${gpus}'"
  found=0
  if discovered="$("${script}" 2>&1)"; then
    found="$(printf '%s' "${discovered}" | python -c 'import json, sys; print(len(json.load(sys.stdin)["addresses"]))')" \
      || fail "${script} printed '${discovered}', not Spark's resource JSON"
  elif [ "${gpus}" != "auto" ]; then
    fail "SPARK_WORKER_GPUS=${gpus} but the GPU discovery failed: ${discovered}"
  else
    echo "sparktrain-worker: no GPU (${discovered}); this worker offers CPUs only" >&2
  fi
  if [ "${gpus}" = "auto" ]; then
    gpus="${found}"
  elif [ "${found}" -lt "${gpus}" ]; then
    fail "SPARK_WORKER_GPUS=${gpus} but ${script} found ${found}: ${discovered}"
  fi
  if [ "${gpus}" -gt 0 ]; then
    gpu_opts="-Dspark.worker.resource.gpu.amount=${gpus} -Dspark.worker.resource.gpu.discoveryScript=${script}"
  fi
fi

mkdir -p "${work_dir}"
# Old applications' work directories (jars, executor logs) are removed once the application has finished.
export SPARK_WORKER_OPTS="${gpu_opts} -Dspark.worker.cleanup.enabled=true ${SPARK_WORKER_OPTS:-}"
echo "sparktrain-worker: ${host} -> ${master}: ${cores} cores, ${memory}, ${gpus} GPU(s), work dir ${work_dir}" >&2
exec "${SPARK_HOME}/bin/spark-class" org.apache.spark.deploy.worker.Worker \
  --host "${host}" --port "${port}" --webui-port "${webui}" \
  --cores "${cores}" --memory "${memory}" --work-dir "${work_dir}" "${master}"
