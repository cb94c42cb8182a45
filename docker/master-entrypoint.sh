#!/usr/bin/env bash
# A Spark standalone master in the foreground (installed as /usr/local/bin/sparktrain-master), started the way
# scripts/cluster.sh starts one: pip's pyspark has bin/spark-class but no sbin/start-master.sh.
#
# Environment (all optional):
#   SPARK_MASTER_HOST        name or address the master binds to and is known by; workers and drivers must use the
#                            same name in spark://HOST:PORT (default: this container's address)
#   SPARK_MASTER_PORT        7077
#   SPARK_MASTER_WEBUI_PORT  8080 (its JSON at /json/)
#   SPARK_MASTER_OPTS        extra -D options, appended; the REST submission server stays off
#   SPARK_RECOVERY_DIR       /srv/spark-recovery: the master's state (FILESYSTEM recovery mode), so that a master
#                            started again takes its workers and applications back; empty = no recovery
#   SPARK_LOCAL_IP           auto (default) = this container's address; see container-net.sh
#   SPARK_CONF_DIR           /srv/sparktrain/spark-conf
set -euo pipefail
# shellcheck source=docker/container-net.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/container-net.sh"

resolve_spark_local_ip daemon
SPARK_HOME="$(spark_home)"
SPARK_CONF_DIR="$(spark_conf_dir)"
export SPARK_HOME SPARK_CONF_DIR

host="${SPARK_MASTER_HOST:-${SPARK_LOCAL_IP}}"
port="${SPARK_MASTER_PORT:-7077}"
webui="${SPARK_MASTER_WEBUI_PORT:-8080}"
recovery="${SPARK_RECOVERY_DIR-/srv/spark-recovery}"
if [ -n "${recovery}" ] && ! mkdir -p "${recovery}" 2>/dev/null; then
  if [ -n "${SPARK_RECOVERY_DIR+set}" ]; then
    echo "sparktrain-master: cannot create SPARK_RECOVERY_DIR ${recovery}" >&2; exit 1
  fi
  echo "sparktrain-master: ${recovery} cannot be created; running without recovery (set SPARK_RECOVERY_DIR)" >&2
  recovery=""
fi
if [ -n "${recovery}" ]; then
  recovery="-Dspark.deploy.recoveryMode=FILESYSTEM -Dspark.deploy.recoveryDirectory='${recovery}'"
fi
export SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false ${recovery} ${SPARK_MASTER_OPTS:-}"

echo "sparktrain-master: spark://${host}:${port} (web UI on port ${webui}, conf ${SPARK_CONF_DIR})" >&2
exec "${SPARK_HOME}/bin/spark-class" org.apache.spark.deploy.master.Master \
  --host "${host}" --port "${port}" --webui-port "${webui}"
