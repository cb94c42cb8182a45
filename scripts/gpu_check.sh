#!/usr/bin/env bash
# The one prepared GPU check (docs/testing.md): run from the repository root on the lent GPU machine, which has
# CUDA torch but neither pyspark nor xgboost. Results go to $OUT (the device tool brings them back) and to
# bench/results/gpu_check.json.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
python3 scripts/gpu_check.py --out "${OUT:-bench/results}" "$@"
if [ -n "${OUT:-}" ] && [ -f "$OUT/gpu_check.json" ]; then cp "$OUT/gpu_check.json" bench/results/; fi
