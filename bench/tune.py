"""Tuning jobs (``POST /tune``) against the article's random-forest ``CrossValidator`` grid, and ASHA against
random search without pruning.

One ``python -m app`` (embedded default, Spark local[2]) in a temporary directory, one trial at a time
(``parallel`` 1), in one run:

- Taxi (the shipped sample, 8,000 training rows, 3,000 evaluation rows): the article's random-forest grid
  (examples/random-forest-cv.json: 12 points x 3 folds), its wall time from ``POST /train`` to ``SUCCEEDED`` and
  its validation RMSE; then a TPE search over the xgboost family and one over the torch MLP
  (examples/xgboost-taxi.json, examples/taxi-mlp.json as bases), each with the grid's wall time as
  ``timeout_minutes`` and a cap on trials. Reported: each search's best validation RMSE among the trials that
  finished within the grid's wall time (counted from the tune's ``POST``), the best overall, and trials per hour.
- Digits CNN (examples/digits-cnn.json, 20 epochs): random search without pruning against TPE with ASHA, 16 trials
  each over the space of Optuna's own PyTorch example (optimizer Adam, RMSprop or SGD, learning rate 1e-5 to 1e-1
  log) with the first conv's width and the batch size, once per seed (11 to 15: TPE starts with the same random
  trials as random search with the same seed, so the pair differs only by what TPE and ASHA do); time to 98%
  validation accuracy is the time of the first per-epoch ``validation_accuracy`` point at or over 0.98
  (``GET /jobs/{id}/metrics`` of each trial) minus the tune job's ``started_at``; the whole search's wall time too.

Targets: the tuned xgboost beats the grid's RMSE within the grid's time; ASHA reaches 98% in at most half the
time random search without pruning takes (the median over the seeds of the ratio). ``--quick`` shrinks the grid,
trials and epochs (about 5 minutes); ``--only taxi`` or ``--only cnn`` runs one half (neither is saved).

Run: ``python -m bench.tune [--quick]``; the last line printed is one JSON object with the figures (also written
to bench/results/tune.json unless ``--quick``). The load average of the machine is recorded at the start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import REPO, free_port, run_job, start_service, stop, wait_ready

TARGET_ACCURACY = 0.98
FINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def _example(name: str) -> dict[str, Any]:
    return dict(json.loads((REPO / "examples" / name).read_text()))


def _ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def tune(client: httpx.Client, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """POST /tune and poll it to the end (SUCCEEDED, or FAILED when no trial completed)."""
    start = time.perf_counter()
    response = client.post("/tune", json=body)
    if response.status_code != 202:
        raise RuntimeError(f"/tune: {response.status_code} {response.text}")
    job = response.json()
    while (job := client.get(f"/jobs/{job['id']}").json())["status"] not in FINAL:
        time.sleep(0.5)
    return job, time.perf_counter() - start


def trials(client: httpx.Client, tune_id: str) -> list[dict[str, Any]]:
    items = client.get("/jobs", params={"type": "train", "limit": 500}).json()["items"]
    return sorted((j for j in items if j["parent_id"] == tune_id), key=lambda j: j["trial"])


def rmse_search(client: httpx.Client, body: dict[str, Any], budget_s: float) -> dict[str, Any]:
    """A regression search: best RMSE overall and among the trials finished within ``budget_s`` of the POST."""
    job, wall = tune(client, body)
    children = trials(client, job["id"])
    created = _ts(job["created_at"])
    rows = (job.get("result") or {}).get("leaderboard", [])
    finished_at = {c["id"]: _ts(c["finished_at"]) - created for c in children if c.get("finished_at")}
    complete = [r for r in rows if r["state"] == "COMPLETE"]
    within = [r for r in complete if finished_at.get(r["job_id"], float("inf")) <= budget_s]
    states: dict[str, int] = {}
    for row in rows:
        states[row["state"]] = states.get(row["state"], 0) + 1
    best = (job.get("result") or {}).get("best") or {}
    return {
        "status": job["status"],
        "wall_s": wall,
        "trials": len(rows),
        "states": states,
        "trials_per_hour": len(complete) / wall * 3600 if wall else None,
        "best_rmse": best.get("metric"),
        "best_params": best.get("params"),
        "best_rmse_within_budget": min((r["metric"] for r in within), default=None),
        "complete_within_budget": len(within),
    }


def time_to_target(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    """A digits search: seconds from the tune job's start to the first validation accuracy >= the target."""
    job, wall = tune(client, body)
    started = _ts(job["started_at"] or job["created_at"])
    reached: float | None = None
    per_trial = []
    for child in trials(client, job["id"]):
        points = client.get(f"/jobs/{child['id']}/metrics", params={"key": "validation_accuracy"}).json()["metrics"]
        hit = [_ts(p["time"]) - started for p in points if p["value"] >= TARGET_ACCURACY]
        first = min(hit, default=None)
        if first is not None and (reached is None or first < reached):
            reached = first
        per_trial.append({
            "trial": child["trial"],
            "status": child["status"],
            "start_s": _ts(child["started_at"]) - started if child.get("started_at") else None,
            "epochs": max((p["epoch"] or 0 for p in points), default=0),
            "best_accuracy": max((p["value"] for p in points), default=None),
            "reached_target_s": first,
        })  # fmt: skip
    states: dict[str, int] = {}
    for row in (job.get("result") or {}).get("leaderboard", []):
        states[row["state"]] = states.get(row["state"], 0) + 1
    return {
        "status": job["status"],
        "wall_s": wall,
        "states": states,
        "epochs_trained": sum(t["epochs"] for t in per_trial),
        "time_to_target_s": reached,
        "best_accuracy": max((t["best_accuracy"] or 0 for t in per_trial), default=None),
        "trials": per_trial,
    }


def _print_search(label: str, r: dict[str, Any]) -> None:
    print(f"{label}: {r['trials']} trials {r['states']} in {r['wall_s']:.1f} s, best rmse {_fmt(r['best_rmse'])} "
          f"(within the grid's time {_fmt(r['best_rmse_within_budget'])}), {_fmt(r['trials_per_hour'], '.0f')} "
          f"trials/h", flush=True)  # fmt: skip


def _fmt(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def taxi_searches(client: httpx.Client, quick: bool) -> dict[str, Any]:
    """The article's forest grid, then TPE over xgboost and over the torch MLP, each in the grid's wall time."""
    rf_body = _example("random-forest-cv.json")
    if quick:
        rf_body["params"]["grid"] = {"maxBins": [100], "maxDepth": [2, 7], "numTrees": [5]}
        rf_body["params"]["num_folds"] = 2
    rf, rf_wall = run_job(client, "/train", rf_body)
    grid = {"wall_s": rf_wall, "rmse": rf["result"]["validation"]["rmse"], "grid": rf_body["params"]["grid"],
            "num_folds": rf_body["params"]["num_folds"],
            "best_params": rf["result"].get("best_params")}  # fmt: skip
    print(f"forest grid: {rf_wall:.1f} s, rmse {grid['rmse']:.4f}", flush=True)
    budget_min = rf_wall / 60

    xgb_base = _example("xgboost-taxi.json")
    xgb_params = {**xgb_base["params"], "num_round": 300, "min_child_weight": 1.0}
    xgb_body = {
        "name": "tune-xgb", "base": {**xgb_base, "params": xgb_params},
        "space": {
            "params.learning_rate": {"type": "loguniform", "low": 0.02, "high": 0.3},
            "params.max_depth": {"type": "int", "low": 3, "high": 10},
            "params.subsample": {"type": "uniform", "low": 0.5, "high": 1.0},
            "params.min_child_weight": {"type": "loguniform", "low": 0.5, "high": 20},
            "params.num_round": {"type": "int", "low": 50, "high": 100 if quick else 400, "step": 50},
        },
        "sampler": "tpe", "pruner": "none", "trials": 8 if quick else 40, "parallel": 1, "metric": "rmse",
        "mode": "min", "timeout_minutes": budget_min, "seed": 7,
    }  # fmt: skip
    xgb = rmse_search(client, xgb_body, rf_wall)
    _print_search("xgboost TPE", xgb)

    mlp_base = _example("taxi-mlp.json")
    mlp_base["training"]["epochs"] = 3 if quick else 10
    mlp_body = {
        "name": "tune-mlp", "base": mlp_base,
        "space": {
            "training.optimizer.learning_rate": {"type": "loguniform", "low": 1e-3, "high": 3e-2},
            "network.layers.1.units": {"type": "int", "low": 16, "high": 128, "step": 16},
            "network.layers.2.units": {"type": "int", "low": 16, "high": 128, "step": 16},
            "training.batch_size_per_worker": {"type": "choice", "values": [64, 128, 256]},
        },
        "sampler": "tpe", "pruner": "asha", "trials": 6 if quick else 30, "parallel": 1, "metric": "rmse",
        "mode": "min", "timeout_minutes": budget_min, "seed": 7,
    }  # fmt: skip
    mlp = rmse_search(client, mlp_body, rf_wall)
    _print_search("torch MLP TPE+ASHA", mlp)
    return {"grid": grid, "xgboost": xgb, "torch_mlp": mlp}


# The space of Optuna's own PyTorch example (optimizer Adam, RMSprop or SGD; learning rate 1e-5 to 1e-1, log),
# with the CNN's first conv width and the batch size: what a user who does not yet know the network searches.
CNN_SPACE = {
    "training.optimizer.type": {"type": "choice", "values": ["adam", "rmsprop", "sgd"]},
    "training.optimizer.learning_rate": {"type": "loguniform", "low": 1e-5, "high": 1e-1},
    "network.layers.0.filters": {"type": "choice", "values": [8, 16, 32]},
    "training.batch_size_per_worker": {"type": "choice", "values": [16, 32, 64]},
}


def cnn_searches(client: httpx.Client, quick: bool) -> dict[str, Any]:
    """Random search without pruning against TPE with ASHA on the digits CNN, once per seed, paired."""
    cnn = _example("digits-cnn.json")
    cnn["training"]["epochs"] = 5 if quick else 20
    # the example fixes the first threshold at its learning rate (0.003); the space samples the rate over four
    # decades, so each trial's threshold is left to follow its own (the tune job warns about a fixed one)
    del cnn["training"]["gradient_sharing"]["threshold_algorithm"]["initial_threshold"]
    n = 4 if quick else 16
    seeds = [11] if quick else [11, 12, 13, 14, 15]
    out: dict[str, Any] = {"target_accuracy": TARGET_ACCURACY, "epochs": cnn["training"]["epochs"], "trials": n,
                           "seeds": seeds, "space": CNN_SPACE, "runs": []}  # fmt: skip
    for seed in seeds:  # TPE's first trials are random ones: with one seed, luck decides which search wins
        common = {"base": cnn, "space": CNN_SPACE, "trials": n, "parallel": 1, "metric": "accuracy",
                  "mode": "max", "seed": seed}  # fmt: skip
        run: dict[str, Any] = {"seed": seed}
        for label, sampler, pruner in (("random", "random", "none"), ("tpe_asha", "tpe", "asha")):
            body = {**common, "name": f"tune-cnn-{label}-{seed}", "sampler": sampler, "pruner": pruner}
            search = time_to_target(client, body)
            run[label] = search
            print(f"digits CNN seed {seed} {label}: {search['states']} {search['epochs_trained']} epochs in "
                  f"{search['wall_s']:.1f} s, best accuracy {_fmt(search['best_accuracy'])}, 98% after "
                  f"{_fmt(search['time_to_target_s'], '.1f')} s", flush=True)  # fmt: skip
        random_t, asha_t = run["random"]["time_to_target_s"], run["tpe_asha"]["time_to_target_s"]
        # random never reaching the target: compare with its whole run instead
        reference = random_t if random_t is not None else run["random"]["wall_s"]
        run["asha_over_random"] = asha_t / reference if asha_t is not None else None
        # and the whole search: the same number of trials, each to its end or its pruning
        run["asha_over_random_search_wall"] = run["tpe_asha"]["wall_s"] / run["random"]["wall_s"]
        out["runs"].append(run)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tune")
    parser.add_argument("--quick", action="store_true", help="a smaller grid, fewer trials and epochs (~5 minutes)")
    parser.add_argument("--only", choices=("taxi", "cnn"), help="one half of the benchmark (not saved)")
    args = parser.parse_args()
    quick = args.quick
    load_start = _load()
    work = Path(tempfile.mkdtemp(prefix="bench-tune-"))
    port = free_port()
    proc = start_service(work, port, SPARKTRAIN_CONSUMER_CONCURRENCY="2", SPARKTRAIN_DATA_ROOTS=str(REPO / "datasets"))
    results: dict[str, Any] = {"quick": quick, "cores": 2, "master": "local[2]", "parallel": 1}
    try:
        wait_ready(f"http://127.0.0.1:{port}/readyz", proc)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600)
        xgb_base = _example("xgboost-taxi.json")
        # warm-up: the executors' Python workers start once in a long-lived driver
        run_job(client, "/train", {**xgb_base, "name": "warm-up", "params": {**xgb_base["params"], "num_round": 5}})
        if args.only in (None, "taxi"):
            results.update(taxi_searches(client, quick))
        if args.only in (None, "cnn"):
            results["digits_cnn"] = cnn_searches(client, quick)
    finally:
        stop(proc)

    targets: dict[str, Any] = {}
    if "xgboost" in results:
        x, grid = results["xgboost"], results["grid"]
        targets["xgboost_beats_grid_within_grid_time"] = (
            x["best_rmse_within_budget"] is not None and x["best_rmse_within_budget"] < grid["rmse"]
        )
    if "digits_cnn" in results:
        ratios = [run["asha_over_random"] for run in results["digits_cnn"]["runs"]]
        reached = [r for r in ratios if r is not None]
        median = statistics.median(reached) if len(reached) == len(ratios) else None
        targets["asha_at_most_half_of_random"] = median is not None and median <= 0.5
        targets["asha_over_random_median"] = median
        targets["asha_over_random_per_seed"] = ratios
        walls = [run["asha_over_random_search_wall"] for run in results["digits_cnn"]["runs"]]
        targets["search_wall_asha_over_random_median"] = statistics.median(walls)
        targets["search_wall_asha_over_random_per_seed"] = walls
    results["targets"] = targets
    results["load_average"] = {"start": load_start, "end": _load()}
    for name, met in targets.items():
        if isinstance(met, bool):
            print(f"target {name}: {'met' if met else 'NOT met'}", flush=True)
    if "digits_cnn" in results:
        ratio = _fmt(targets["asha_over_random_median"], ".2f")
        print(
            f"ASHA over random, time to {TARGET_ACCURACY:.0%}: median {ratio}; whole search: median "
            f"{targets['search_wall_asha_over_random_median']:.2f}",
            flush=True,
        )
    print(f"load average (1, 5, 15 min): start {load_start}, end {results['load_average']['end']}", flush=True)
    if not quick and args.only is None:
        (REPO / "bench" / "results" / "tune.json").write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
