"""xgboost through the service against plain single-process ``xgboost.train``, and the article's random forest grid.

Same data, same rounds, same parameters (the article's: learning_rate 0.05, max_depth 8, subsample 0.8, gamma 1,
500 rounds, histogram method), same two cores: the service on Spark local[2] with its default for one machine
(one worker with both cores; ``--workers 2`` for two single-threaded workers), plain xgboost with ``nthread`` 2
in this process.

- Service wall time: from ``POST /train`` to ``SUCCEEDED`` as a client sees it (planning, reading and checking
  the data, the barrier stage, validation metrics, saving and registering the model). A warm-up job runs first
  (a long-lived driver starts its executors' Python workers once).
- Plain wall time: reading the same parquet files with pandas, building the DMatrix, training, predicting the
  evaluation rows.
- RMSE of both on the same evaluation rows; the 10,000-row run gives the fixed overhead.
- The article's comparison: its random forest grid (maxBins 100/200 x maxDepth 2/7/10 x numTrees 5/20, 3-fold
  cross-validation; examples/random-forest-cv.json) against xgboost with the article's parameters
  (examples/xgboost-taxi.json), both through the service on the shipped taxi sample.

Run: ``python -m bench.xgboost [--quick]``; the last line printed is one JSON object with the figures
(also written to bench/results/xgboost.json unless ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common import REPO, free_port, run_job, start_service, stop, wait_ready
from datasets import taxi

ARTICLE = {"learning_rate": 0.05, "max_depth": 8, "subsample": 0.8, "gamma": 1, "tree_method": "hist"}
CORES = 2
"""Spark local[2] for the service; nthread 2 for plain xgboost."""


def plain_xgboost(train_path: Path, eval_path: Path, rounds: int) -> dict[str, float]:
    import pandas as pd
    import xgboost

    start = time.perf_counter()
    train, test = pd.read_parquet(train_path), pd.read_parquet(eval_path)
    features = list(taxi.FEATURES)
    dtrain = xgboost.DMatrix(train[features], label=train[taxi.LABEL], nthread=CORES)
    params = {**ARTICLE, "objective": "reg:squarederror", "nthread": CORES, "seed": 0}
    booster = xgboost.train(params, dtrain, num_boost_round=rounds)
    predicted = booster.predict(xgboost.DMatrix(test[features], nthread=CORES))
    wall = time.perf_counter() - start
    rmse = float(np.sqrt(np.mean((predicted - test[taxi.LABEL].to_numpy()) ** 2)))
    return {"wall_s": wall, "rmse": rmse}


def service_xgboost(
    client: httpx.Client, uri: str, eval_uri: str, rounds: int, name: str, workers: int | None
) -> dict[str, Any]:
    body = {
        "name": name,
        "framework": "xgboost",
        "dataset": {"uri": uri, "features": list(taxi.FEATURES), "label": taxi.LABEL, "task": "regression"},
        "validation": {"uri": eval_uri},
        "params": {**ARTICLE, "num_round": rounds, **({"num_workers": workers} if workers else {})},
        "device": "auto",
    }
    job, wall = run_job(client, "/train", body)
    result = job["result"]
    return {"wall_s": wall, "rmse": result["validation"]["rmse"], "workers": result["num_workers"], "job_id": job["id"]}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.xgboost")
    parser.add_argument("--quick", action="store_true", help="100,000 rows and 100 rounds instead of 1,000,000 and 500")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="num_workers of the service's jobs (default: the service's own, 1 x every core on local)",
    )
    args = parser.parse_args()
    big, rounds = (100_000, 100) if args.quick else (1_000_000, 500)
    work = Path(tempfile.mkdtemp(prefix="bench-xgboost-"))
    data = work / "data"
    sizes = {"10k": 10_000, "big": big}
    for label, rows in sizes.items():
        taxi.write(str(data / label), rows, max(3_000, rows // 10), seed=0)
    port = free_port()
    proc = start_service(work, port, SPARKTRAIN_DATA_ROOTS=f"{data},{REPO / 'datasets'}")
    results: dict[str, Any] = {"rounds": rounds, "cores": CORES, "params": ARTICLE, "runs": {}}
    try:
        wait_ready(f"http://127.0.0.1:{port}/readyz", proc)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600)
        service_xgboost(client, "10k/train.parquet", "10k/eval.parquet", 5, "warm-up", args.workers)
        for label, rows in sizes.items():
            plain = plain_xgboost(data / label / "train.parquet", data / label / "eval.parquet", rounds)
            ours = service_xgboost(
                client, f"{label}/train.parquet", f"{label}/eval.parquet", rounds, f"taxi-{label}", args.workers
            )
            results["runs"][str(rows)] = {
                "rows": rows,
                "service": ours,
                "plain": plain,
                "wall_ratio": ours["wall_s"] / plain["wall_s"],
                "rmse_diff": (ours["rmse"] - plain["rmse"]) / plain["rmse"],
            }
            print(f"{rows:>9} rows: service {ours['wall_s']:7.1f} s rmse {ours['rmse']:.4f} | plain "
                  f"{plain['wall_s']:7.1f} s rmse {plain['rmse']:.4f} | ratio {ours['wall_s'] / plain['wall_s']:.2f}",
                  flush=True)  # fmt: skip
        small = results["runs"][str(sizes["10k"])]
        results["fixed_overhead_s"] = small["service"]["wall_s"] - small["plain"]["wall_s"]

        rf_body = json.loads((REPO / "examples" / "random-forest-cv.json").read_text())
        xgb_body = json.loads((REPO / "examples" / "xgboost-taxi.json").read_text())
        rf, rf_wall = run_job(client, "/train", rf_body)
        xgb, xgb_wall = run_job(client, "/train", xgb_body)
        results["article"] = {
            "data": "datasets/taxi (8,000 training rows, 3,000 evaluation rows)",
            "random_forest_grid": {
                "wall_s": rf_wall,
                "rmse": rf["result"]["validation"]["rmse"],
                "best_params": rf["result"]["best_params"],
            },
            "xgboost": {"wall_s": xgb_wall, "rmse": xgb["result"]["validation"]["rmse"]},
        }
        a = results["article"]
        print(f"article, shipped sample: random forest grid {rf_wall:.1f} s rmse {a['random_forest_grid']['rmse']:.4f}"
              f" | xgboost {xgb_wall:.1f} s rmse {a['xgboost']['rmse']:.4f}", flush=True)  # fmt: skip
    finally:
        stop(proc)
    big_run, article = results["runs"][str(big)], results["article"]
    results["acceptance"] = {
        "rmse_within_2pct_of_plain": abs(big_run["rmse_diff"]) <= 0.02,
        f"wall_ratio_{big}": big_run["wall_ratio"],
        "wall_under_1.5x_plain": big_run["wall_ratio"] < 1.5,
        "xgboost_beats_rf_grid": article["xgboost"]["rmse"] < article["random_forest_grid"]["rmse"],
    }
    if not args.quick and args.workers is None:
        (REPO / "bench" / "results" / "xgboost.json").write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
