#!/usr/bin/env bash
# A real Spark standalone cluster on this machine, from the pip-installed pyspark (which has no start-master.sh):
# one master and N workers, bound to 127.0.0.1 only, each worker with its own cores, memory and work directory,
# stopped by PID.
#
#   scripts/cluster.sh start [--workers N] [--cores C] [--memory 2g] [--port 7077] [--dir var/cluster] [--fake-gpus N]
#   (the master's web UI, with its JSON at /json/, listens on port + 1)
#   scripts/cluster.sh stop  [--dir var/cluster]
#   scripts/cluster.sh status [--dir var/cluster]
#   scripts/cluster.sh master [--dir var/cluster]   (starts the master again after it died, on its port)
#   scripts/cluster.sh worker N [--dir var/cluster]  (starts worker N again after it died, as it was started)
#
# The master keeps its state in <dir>/recovery (Spark's FILESYSTEM recovery mode): a master started again with
# `master` takes back the workers and the running applications, so a driver keeps its executors and can be given
# new ones. start and stop clear that state.
#
# Then: SPARKTRAIN_SPARK_MASTER=spark://127.0.0.1:7077 python -m app
#
# --fake-gpus N stands in for N GPUs on this machine, shared out among the workers as on a real one: each worker
# gets N / workers of them (N must be a multiple of the workers), through a stand-in nvidia-smi of its own that
# reports only its GPUs to spark-conf/getGpusResources.sh, so no two workers offer the same address (how the GPU
# scheduling path is tested on machines without GPUs; the executors then get GPU addresses but no CUDA).
#
# A worker that died is not started again by anything (its executors' slots stay gone): `worker N` does it, with the
# cores, memory and stand-in GPUs it had, once the master runs. status names each worker, running or gone.
#
# status exits 1 when the master does not run; stop says what it stopped.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-$REPO/.venv/bin/python}"
cmd="${1:-}"; shift || true
number=""  # worker N's N
if [ "$cmd" = worker ]; then number="${1:-}"; shift || true; fi
workers=2 cores=1 memory=2g port=7077 port_given=0 dir="$REPO/var/cluster" fake_gpus=0
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers="$2"; shift 2 ;;
    --cores) cores="$2"; shift 2 ;;
    --memory) memory="$2"; shift 2 ;;
    --port) port="$2" port_given=1; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --fake-gpus) fake_gpus="$2"; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

# "1 worker", "2 workers"
count() { if [ "$1" -eq 1 ]; then echo "$1 $2"; else echo "$1 ${2}s"; fi; }
if [ "$fake_gpus" -gt 0 ] && [ $((fake_gpus % workers)) -ne 0 ]; then
  echo "--fake-gpus $fake_gpus cannot be shared out evenly among $(count "$workers" worker)" >&2; exit 2
fi

spark_home() { "$PYTHON" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))'; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# A daemon killed is a zombie until whoever adopted it reaps it: dead, though kill -0 still finds it.
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null && [[ "$(ps -o stat= -p "$(cat "$1")" 2>/dev/null)" != Z* ]]; }
# Workers the master counts as alive, from its web UI's JSON (port + 1); the daemons log only warnings.
alive_workers() {
  "$PYTHON" - "$((port + 1))" <<'PY' 2>/dev/null || echo 0
import json, sys, urllib.request
print(json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json/", timeout=2))["aliveworkers"])
PY
}
# The ids of the workers the master counts as alive, one a line.
alive_worker_ids() {
  "$PYTHON" - "$((port + 1))" <<'PY' 2>/dev/null || true
import json, sys, urllib.request
state = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json/", timeout=2))
print("\n".join(w["id"] for w in state["workers"] if w["state"] == "ALIVE"))
PY
}

environment() {
  home="$(spark_home)"
  export SPARK_HOME="$home" SPARK_CONF_DIR="$REPO/spark-conf" SPARK_LOCAL_IP=127.0.0.1
  export PYSPARK_PYTHON="$PYTHON" SPARK_LOG_DIR="$dir/logs" SPARK_PID_DIR="$dir"
  mkdir -p "$SPARK_LOG_DIR" "$dir/recovery"
}

# The master, with its state in $dir/recovery; its log is appended to, across restarts. (Spark's launcher splits
# *_OPTS as a shell would, quotes kept: a directory's path may hold spaces.)
start_master() {
  SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false -Dspark.deploy.recoveryMode=FILESYSTEM -Dspark.deploy.recoveryDirectory='$dir/recovery'" \
    nohup "$home/bin/spark-class" org.apache.spark.deploy.master.Master \
      --host 127.0.0.1 --port "$port" --webui-port "$((port + 1))" >>"$dir/logs/master.out" 2>&1 &
  echo $! >"$dir/master.pid"
  for _ in $(seq 1 60); do port_open "$port" && break; sleep 0.5; done
  port_open "$port" || { echo "the master did not open port $port; see $dir/logs/master.out" >&2; exit 1; }
}

master() {
  if alive "$dir/master.pid"; then echo "the master of $dir runs ($(cat "$dir/master.pid"))" >&2; exit 1; fi
  [ -d "$dir/recovery" ] || { echo "no cluster was started from $dir (start it first)" >&2; exit 1; }
  if [ "$port_given" -eq 0 ] && [ -f "$dir/port" ]; then port="$(cat "$dir/port")"; fi  # the port it had
  local home; environment
  start_master
  echo "spark://127.0.0.1:$port (master started again; it takes back its workers and applications from $dir/recovery)"
}

# Worker $1 (its work directory, log and pid file numbered so), offering $2 stand-in GPUs (0: none) through the
# nvidia-smi in $dir/bin-$1.
start_worker() {
  local i="$1" gpus="$2" worker_opts="" path="$PATH"
  if [ "$gpus" -gt 0 ]; then
    worker_opts="-Dspark.worker.resource.gpu.amount=$gpus -Dspark.worker.resource.gpu.discoveryScript='$REPO/spark-conf/getGpusResources.sh'"
    path="$dir/bin-$i:$PATH"
  fi
  mkdir -p "$dir/worker-$i"
  PATH="$path" SPARK_WORKER_OPTS="$worker_opts" \
    nohup "$home/bin/spark-class" org.apache.spark.deploy.worker.Worker \
      --host 127.0.0.1 --cores "$cores" --memory "$memory" --work-dir "$dir/worker-$i" --webui-port 0 \
      "spark://127.0.0.1:$port" >>"$dir/logs/worker-$i.out" 2>&1 &
  echo $! >"$dir/worker-$i.pid"
}

# Worker $number again, after it died: with the cores, memory and GPUs the cluster's workers were started with,
# registered with the master (a new worker to it: the dead one's executors are not taken back).
worker() {
  case "$number" in ''|*[!0-9]*) echo "usage: scripts/cluster.sh worker N [--dir DIR] (N: a worker's number, from status)" >&2; exit 2 ;; esac
  [ -f "$dir/worker-$number.pid" ] || { echo "$dir has no worker $number (status lists its workers)" >&2; exit 1; }
  if alive "$dir/worker-$number.pid"; then echo "worker $number of $dir runs ($(cat "$dir/worker-$number.pid"))" >&2; exit 1; fi
  if [ "$port_given" -eq 0 ] && [ -f "$dir/port" ]; then port="$(cat "$dir/port")"; fi
  alive "$dir/master.pid" || { echo "the master of $dir does not run: start it again first (scripts/cluster.sh master)" >&2; exit 1; }
  local each=0
  if [ -f "$dir/worker-options" ]; then read -r cores memory each <"$dir/worker-options"; fi
  local home; environment
  local before; before="$(alive_worker_ids)"
  start_worker "$number" "$each"
  local found=""
  for _ in $(seq 1 120); do
    found="$(alive_worker_ids | grep -vxF -e "$before" -e '' || true)"
    [ -n "$found" ] && break
    alive "$dir/worker-$number.pid" || break
    sleep 0.5
  done
  if [ -z "$found" ]; then echo "worker $number did not register with the master; see $dir/logs/worker-$number.out" >&2; exit 1; fi
  echo "worker $number started again ($(cat "$dir/worker-$number.pid")): $(count "$cores" core), $memory, registered as $found"
}

start() {
  mkdir -p "$dir"
  if alive "$dir/master.pid"; then echo "a cluster already runs from $dir (stop it first)" >&2; exit 1; fi
  rm -rf "$dir/recovery"  # a new cluster: nothing of an earlier one's to take back (it would wait for it)
  local home; environment
  start_master
  echo "$port" >"$dir/port"

  local each=$((fake_gpus / workers))
  echo "$cores $memory $each" >"$dir/worker-options"  # what `worker N` starts a worker again with
  for i in $(seq 1 "$workers"); do
    if [ "$fake_gpus" -gt 0 ]; then
      # Worker i's stand-in for nvidia-smi --query-gpu=index --format=csv,noheader: its own share of the indexes.
      mkdir -p "$dir/bin-$i"
      printf '#!/usr/bin/env bash\nseq %d %d\n' "$(((i - 1) * each))" "$((i * each - 1))" >"$dir/bin-$i/nvidia-smi"
      chmod +x "$dir/bin-$i/nvidia-smi"
    fi
    : >"$dir/logs/worker-$i.out"  # a new cluster's (worker N started again appends to its log)
    start_worker "$i" "$each"
  done
  local registered=0
  for _ in $(seq 1 120); do
    registered="$(alive_workers)"
    [ "$registered" -ge "$workers" ] && break
    sleep 0.5
  done
  if [ "$registered" -lt "$workers" ]; then
    echo "$registered of $workers workers registered; see $dir/logs/" >&2; stop; exit 1
  fi
  local gpus=""
  [ "$fake_gpus" -gt 0 ] && gpus=", $(count "$each" "stand-in GPU") each"
  echo "spark://127.0.0.1:$port ($(count "$workers" worker) x $(count "$cores" core), $memory$gpus; state in $dir)"
}

stop() {
  local stopped=""
  for pid_file in "$dir"/worker-*.pid "$dir"/master.pid; do
    [ -f "$pid_file" ] || continue
    local pid; pid="$(cat "$pid_file")"
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
      kill -9 "$pid" 2>/dev/null || true
      stopped+="${stopped:+, }$(basename "$pid_file" .pid) ($pid)"
    fi
    rm -f "$pid_file"
  done
  rm -rf "$dir/recovery"
  if [ -z "$stopped" ]; then echo "no cluster running in $dir"; else echo "stopped $stopped in $dir"; fi
}

status() {
  local found=0
  for pid_file in "$dir"/master.pid "$dir"/worker-*.pid; do
    [ -f "$pid_file" ] || continue
    found=1
    if alive "$pid_file"; then echo "$(basename "$pid_file" .pid): running ($(cat "$pid_file"))"
    else echo "$(basename "$pid_file" .pid): gone"; fi
  done
  if [ "$found" -eq 0 ]; then echo "no cluster running in $dir" >&2; exit 1; fi
  alive "$dir/master.pid" || exit 1
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  master) master ;;
  worker) worker ;;
  *) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
