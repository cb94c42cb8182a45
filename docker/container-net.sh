# shellcheck shell=bash
# Sourced by the images' scripts (entrypoint.sh, master-entrypoint.sh, worker-entrypoint.sh, healthcheck.sh), which
# find it next to themselves: in the images all of them live in /usr/local/lib/sparktrain/.
#
# spark-conf/spark-env.sh binds every Spark process to 127.0.0.1 unless SPARK_LOCAL_IP says otherwise. That is right
# for the embedded driver (local[*]) and wrong for anything in a cluster: the master, the workers, their executors and
# a driver whose executors must connect back all have to listen on the container's network. SPARK_LOCAL_IP=auto
# means "this container's IPv4 address" (the one Docker writes for the container's hostname into /etc/hosts).

# This container's IPv4 address, or nothing.
container_ip() {
  local ip=""
  ip="$(getent ahostsv4 "$(hostname)" 2>/dev/null | awk '$1 !~ /^127\./ {print $1; exit}')" || true
  if [ -z "${ip}" ]; then
    ip="$(hostname -I 2>/dev/null | tr ' ' '\n' | awk '/^[0-9.]+$/ && !/^127\./ {print; exit}')" || true
  fi
  printf '%s' "${ip}"
}

# Replace SPARK_LOCAL_IP=auto (and, with "daemon", an unset SPARK_LOCAL_IP) by this container's address and export it.
resolve_spark_local_ip() {
  local mode="${1:-}"
  if [ "${SPARK_LOCAL_IP:-}" = "auto" ] || { [ "${mode}" = "daemon" ] && [ -z "${SPARK_LOCAL_IP:-}" ]; }; then
    local ip
    ip="$(container_ip)"
    if [ -z "${ip}" ]; then
      echo "sparktrain: SPARK_LOCAL_IP=auto but no non-loopback IPv4 address was found for host $(hostname)" >&2
      return 1
    fi
    export SPARK_LOCAL_IP="${ip}"
  fi
}

# SPARK_HOME of pip's pyspark (it has bin/spark-class but no sbin/start-*.sh), unless already set.
spark_home() {
  if [ -n "${SPARK_HOME:-}" ]; then
    printf '%s' "${SPARK_HOME}"
  else
    python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__), end="")'
  fi
}

# The Spark conf directory of the project (spark-defaults.conf, spark-env.sh, log4j2.properties, the GPU profile and
# discovery script), unless SPARK_CONF_DIR is set.
spark_conf_dir() {
  printf '%s' "${SPARK_CONF_DIR:-/srv/sparktrain/spark-conf}"
}
