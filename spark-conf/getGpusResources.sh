#!/usr/bin/env bash
# Spark GPU resource discovery (spark.{driver,executor,worker}.resource.gpu.discoveryScript): prints the NVIDIA
# GPUs this process may use as {"name":"gpu","addresses":["0","1"]}, the format Spark expects.
# Based on Spark's examples/src/main/scripts/getGpusResources.sh. In a container it sees the GPUs given to the
# container (docker run --gpus ...); it assumes a worker or executor owns every GPU it sees.
# Exits 1, with the reason on stderr, when nvidia-smi is missing or fails.
set -euo pipefail

if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "getGpusResources.sh: nvidia-smi not found (no NVIDIA driver on this host or in this container)" >&2
  exit 1
fi
if ! indexes=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>&1); then
  echo "getGpusResources.sh: nvidia-smi failed: ${indexes}" >&2
  exit 1
fi

addresses=""
while IFS= read -r index; do
  index="${index//[[:space:]]/}"
  [[ -z "${index}" ]] && continue
  addresses+="${addresses:+,}\"${index}\""
done <<<"${indexes}"
echo "{\"name\":\"gpu\",\"addresses\":[${addresses}]}"
