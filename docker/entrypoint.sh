#!/usr/bin/env bash
# ENTRYPOINT of every sparktrain image (installed as /usr/local/bin/sparktrain-entrypoint): resolves
# SPARK_LOCAL_IP=auto to this container's address (container-net.sh), then runs the command unchanged:
#   python -m app          the driver (the default CMD of the driver images)
#   sparktrain-master      a Spark standalone master (master-entrypoint.sh)
#   sparktrain-worker      a Spark standalone worker (worker-entrypoint.sh; the default CMD of the worker image)
# Any other SPARK_LOCAL_IP (the driver images' default 127.0.0.1 for local[*]) is left as it is.
set -euo pipefail
# shellcheck source=docker/container-net.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/container-net.sh"

resolve_spark_local_ip
if [ $# -eq 0 ]; then
  echo "sparktrain-entrypoint: no command given" >&2
  exit 2
fi
exec "$@"
