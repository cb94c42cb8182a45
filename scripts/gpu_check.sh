#!/usr/bin/env bash
# The one prepared GPU check (docs/testing.md): run from the repository root on the lent GPU machine, which has
# CUDA torch but neither pyspark nor xgboost. Results go to $OUT (the device tool brings them back) and to
# bench/results/gpu_check.json.
#   1. the tests that skip without CUDA (the codec's and the residuals'), run with that machine's pytest;
#   2. scripts/gpu_check.py: the codec on CUDA beside CPU, the executor-side trainer on CPU and CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
OUTDIR="${OUT:-bench/results}"
mkdir -p "$OUTDIR"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
# No conftest: it starts Spark, Redis and PostgreSQL, none of which that machine has; these tests need none.
set +e
timeout 300 python3 -m pytest -q --noconftest -p no:cacheprovider -p no:warnings -o addopts="" -rs \
  tests/workers/codecs tests/workers/training/torch/test_residuals.py 2>&1 | tee "$OUTDIR/gpu_check_pytest.txt"
echo "pytest exit: ${PIPESTATUS[0]}" | tee -a "$OUTDIR/gpu_check_pytest.txt"
set -e
python3 scripts/gpu_check.py --out "$OUTDIR" "$@"
if [ -n "${OUT:-}" ]; then
  for f in gpu_check.json gpu_check_pytest.txt; do [ -f "$OUT/$f" ] && cp "$OUT/$f" bench/results/; done
fi
