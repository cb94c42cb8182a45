#!/usr/bin/env bash
# HEALTHCHECK of the images (installed as /usr/local/bin/sparktrain-healthcheck):
#   sparktrain-healthcheck driver   the API answers /readyz (port SPARKTRAIN_PORT, default 8000)
#   sparktrain-healthcheck master   the master's web UI JSON says ALIVE
#   sparktrain-healthcheck worker   the worker's web UI JSON answers
# The daemons' web UIs listen on SPARK_LOCAL_IP (this container's address with SPARK_LOCAL_IP=auto), not loopback.
set -euo pipefail
# shellcheck source=docker/container-net.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/container-net.sh"

role="${1:-driver}"
case "${role}" in
  driver)
    exec curl -fsS -o /dev/null --max-time 4 "http://127.0.0.1:${SPARKTRAIN_PORT:-8000}/readyz"
    ;;
  master | worker)
    resolve_spark_local_ip daemon
    if [ "${role}" = master ]; then port="${SPARK_MASTER_WEBUI_PORT:-8080}"; else port="${SPARK_WORKER_WEBUI_PORT:-8081}"; fi
    body="$(curl -fsS --max-time 4 "http://${SPARK_LOCAL_IP}:${port}/json/")"
    if [ "${role}" = master ]; then
      [[ "${body}" == *'"status" : "ALIVE"'* || "${body}" == *'"status":"ALIVE"'* ]]
    else
      [[ "${body}" == *'"masterurl"'* ]]
    fi
    ;;
  *)
    echo "usage: sparktrain-healthcheck driver|master|worker" >&2
    exit 2
    ;;
esac
