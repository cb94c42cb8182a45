"""POST /tune on the shipped digits with a tiny MLP (one barrier worker per trial, local[2]): a random search that
ends with a leaderboard and the alias ``best``; a search with ``parallel`` 2 on the default two consumer threads
whose two trials run at once while a training job sent meanwhile still starts; an ASHA search that prunes a trial
with a hopeless learning rate; bad searches refused with a 422 naming the field and nothing written; a cancel that
stops the running trial and keeps the finished one."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from bench.chaos import digits_job
from tests.e2e.chaos_support import log_lines, wait_final
from tests.helpers import TAXI_FEATURES, Service, running_service, taxi_request

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def svc(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    # the default 2 consumer threads: the tune job holds none once taken, its trials and other jobs share them
    with running_service(spark, tmp_path_factory.mktemp("tune"), max_trials=20) as service:
        yield service


def _tune(name: str, *, epochs: int = 1, **search: Any) -> dict[str, Any]:
    base = digits_job(name, epochs=epochs, units=16, batch=128, workers=1)
    return {"name": name, "base": base, **search}


def _post(svc: Service, body: dict[str, Any]) -> dict[str, Any]:
    response = svc.client.post("/tune", json=body)
    assert response.status_code == 202, response.text
    assert response.headers["location"] == f"/jobs/{response.json()['id']}"
    return dict(response.json())


def _children(svc: Service, tune_id: str) -> dict[int, dict[str, Any]]:
    items = svc.client.get("/jobs", params={"parent_id": tune_id, "limit": 500}).json()["items"]
    assert all(j["parent_id"] == tune_id for j in items), items  # only the tune's trials, among other tunes' jobs
    return {j["trial"]: j for j in items}


def test_random_search_ends_with_a_leaderboard_and_the_best_alias(svc: Service) -> None:
    space = {
        "training.optimizer.learning_rate": {"type": "loguniform", "low": 3e-3, "high": 3e-2},
        "network.layers.0.units": {"type": "int", "low": 16, "high": 32, "step": 16},
    }
    job = _post(svc, _tune("tune-random", space=space, sampler="random", seed=6, trials=3, parallel=2,
                           metric="accuracy"))  # fmt: skip
    assert job["type"] == "tune" and job["status"] == "QUEUED"
    assert job["id"] in [j["id"] for j in svc.client.get("/jobs", params={"type": "tune"}).json()["items"]]
    done = wait_final(svc.client, job["id"], timeout=300)
    assert done["status"] == "SUCCEEDED", done["error"]
    result = done["result"]
    board = result["leaderboard"]
    assert len(board) == 3 and {r["trial"] for r in board} == {0, 1, 2}
    # no pruner: the first threshold is the trainer's to plan
    assert all("gradient_sharing" not in _children(svc, job["id"])[r["trial"]]["request"]["training"] for r in board)
    assert all(r["state"] == "COMPLETE" and r["epochs"] == 1 for r in board), board
    assert [r["metric"] for r in board] == sorted((r["metric"] for r in board), reverse=True)  # mode max
    for row in board:
        assert set(row["params"]) == set(space)
        assert 3e-3 <= row["params"]["training.optimizer.learning_rate"] <= 3e-2
        assert row["params"]["network.layers.0.units"] in (16, 32)
    best = result["best"]
    assert best["trial"] == board[0]["trial"] and best["metric"] == board[0]["metric"] > 0.5
    assert best["model"]["name"] == "tune-random"
    assert result["importances"] is None or set(result["importances"]) == set(space)

    children = _children(svc, job["id"])
    assert sorted(children) == [0, 1, 2]
    for row in board:  # every trial is an ordinary training job with the sampled body and its own version
        child = children[row["trial"]]
        assert child["id"] == row["job_id"] and child["status"] == "SUCCEEDED"
        assert child["request"]["network"]["layers"][0]["units"] == row["params"]["network.layers.0.units"]
        assert child["result"]["validation"]["accuracy"] == row["metric"]
        assert svc.client.get(f"/jobs/{child['id']}/metrics", params={"key": "validation_accuracy"}).json()["metrics"]
        assert child["request"]["training"]["data_path"] == "export"  # the base chose none: trials share the rows
    # trials 0 and 1 ran at once and each prepared the rows (writing the same export, each under a name of its
    # own); trial 2 started after one of them had marked the export complete, and read it
    assert any(line.startswith("training from exported tensors") for line in log_lines(svc.client, children[2]["id"]))
    model = next(m for m in svc.client.get("/models").json()["items"] if m["name"] == "tune-random")
    assert len(model["versions"]) == 3
    assert model["aliases"] == {"best": best["model"]["version"]}
    assert done["model"] == best["model"]  # the tune job's own model (it was null)
    version = svc.client.get(f"/models/tune-random/versions/{best['model']['version']}").json()
    assert version["job_id"] == best["job_id"]
    # the trial's tag (the "model versions ... with a trial tag"; the versions said only their job)
    assert version["params"]["tune"] == {"job_id": done["id"], "trial": best["trial"], "params": best["params"]}


def test_parallel_trials_run_at_once_and_other_jobs_still_start(svc: Service) -> None:
    # local[2] and 2 consumer threads: both trials of parallel 2 run at once (the tune job holds no thread), and a
    # training job sent while they run takes the first thread one frees, ahead of the third trial
    space = {"training.optimizer.learning_rate": {"type": "loguniform", "low": 3e-3, "high": 3e-2}}
    tune = _post(svc, _tune("tune-parallel", epochs=3, space=space, sampler="random", seed=5, trials=3, parallel=2,
                            metric="accuracy"))  # fmt: skip
    deadline = time.monotonic() + 240
    while len(_children(svc, tune["id"])) < 2:
        assert time.monotonic() < deadline, "the tune job did not submit two trials"
        time.sleep(0.2)
    plain = svc.client.post("/train", json=digits_job("plain-during-tune", epochs=1, units=16, batch=128, workers=1))
    assert plain.status_code == 202, plain.text
    done = wait_final(svc.client, tune["id"], timeout=300)
    assert done["status"] == "SUCCEEDED", done["error"]
    other = wait_final(svc.client, plain.json()["id"], timeout=300)
    assert other["status"] == "SUCCEEDED", other["error"]
    trials = _children(svc, tune["id"])
    assert sorted(trials) == [0, 1, 2]
    at = {n: (_when(t["started_at"]), _when(t["finished_at"])) for n, t in trials.items()}
    assert at[0][0] < at[1][1] and at[1][0] < at[0][1], at  # trials 0 and 1 were RUNNING at the same time
    assert _when(other["started_at"]) < _when(done["finished_at"]), (other["started_at"], done["finished_at"])


def _when(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


ASHA_EPOCHS = 150


def test_asha_prunes_the_hopeless_learning_rate(svc: Service) -> None:
    # grid order is the listed order: the good rate sets the rung, then the hopeless one falls below it at epoch 1.
    # An epoch of this network takes a few hundredths of a second, and the prune reaches the trial through the
    # metrics written, the runner's poll and the cancel: 150 epochs leave it seconds to land (15 were seen to run out,
    # and 40 once, after small models began to skip the threshold and ran faster).
    space = {"training.optimizer.learning_rate": {"type": "choice", "values": [0.01, 1e-7]}}
    body = _tune("tune-asha", epochs=ASHA_EPOCHS, space=space, sampler="grid", pruner="asha", trials=2, parallel=1,
                 metric="loss")  # fmt: skip
    done = wait_final(svc.client, _post(svc, body)["id"], timeout=300)
    assert done["status"] == "SUCCEEDED", done["error"]
    board = {r["trial"]: r for r in done["result"]["leaderboard"]}
    assert board[0]["state"] == "COMPLETE" and board[0]["epochs"] == ASHA_EPOCHS, board
    assert board[1]["state"] == "PRUNED" and 1 <= board[1]["epochs"] < ASHA_EPOCHS, board
    assert done["result"]["best"]["trial"] == 0 and done["result"]["mode"] == "min"
    pruned = svc.client.get(f"/jobs/{board[1]['job_id']}").json()
    assert pruned["status"] == "CANCELLED" and pruned["model"] is None
    assert any(w.startswith(f"pruned by tune job {done['id']}") for w in pruned["warnings"]), pruned["warnings"]
    # under a pruner each trial's first threshold is written in at one optimizer step, its own learning rate
    for row in board.values():
        training = svc.client.get(f"/jobs/{row['job_id']}").json()["request"]["training"]
        first = training["gradient_sharing"]["threshold_algorithm"]["initial_threshold"]
        assert first == pytest.approx(training["optimizer"]["learning_rate"] * 63 / 64, rel=1e-12), training
    assert any("first threshold starts at one optimizer step" in line for line in log_lines(svc.client, done["id"]))


def test_median_prunes_a_hopeless_xgboost_trial_mid_fit(svc: Service) -> None:
    # grid order is the listed order: at 0.3 the first trial early-stops after a few hundred rounds and sets the
    # median; at 1e-4 the validation rmse hardly moves from the mean, so the pruner stops the second trial at its first
    # reported rounds. Unpruned it would run all 5,000 (no early stop: it keeps improving, a little, every round).
    base = {**taxi_request("tune-xgb"), "framework": "xgboost",
            "params": {"learning_rate": 0.1, "max_depth": 6, "num_round": 5000, "early_stopping_rounds": 10,
                       "num_workers": 1}}  # fmt: skip
    space = {"params.learning_rate": {"type": "choice", "values": [0.3, 1e-4]}}
    body = {"name": "tune-xgb", "base": base, "space": space, "sampler": "grid", "pruner": "median", "trials": 2,
            "parallel": 1, "metric": "rmse"}  # fmt: skip
    done = wait_final(svc.client, _post(svc, body)["id"], timeout=300)
    assert done["status"] == "SUCCEEDED", done["error"]
    board = {r["trial"]: r for r in done["result"]["leaderboard"]}
    assert board[0]["state"] == "COMPLETE" and board[0]["rounds"] < 5000, board
    assert board[1]["state"] == "PRUNED" and 1 <= board[1]["rounds"] < 5000, board
    pruned = svc.client.get(f"/jobs/{board[1]['job_id']}").json()
    assert pruned["status"] == "CANCELLED" and pruned["model"] is None
    assert any(w.startswith(f"pruned by tune job {done['id']} at round") for w in pruned["warnings"]), pruned
    # the fit was stopped through its Spark job group, not trained to the end and then marked cancelled
    tracker = svc.runtime.spark.sparkContext.statusTracker()
    spark_jobs = [tracker.getJobInfo(i) for i in tracker.getJobIdsForGroup(pruned["id"])]
    assert spark_jobs and all(j is not None and j.status != "RUNNING" for j in spark_jobs), spark_jobs
    assert any(j.status == "FAILED" for j in spark_jobs), spark_jobs
    rounds = svc.client.get(f"/jobs/{pruned['id']}/metrics", params={"key": "validation_rmse"}).json()["metrics"]
    steps = [m["step"] for m in rounds]
    assert steps == list(range(1, len(steps) + 1)) and board[1]["rounds"] <= len(steps) < 5000, steps[-5:]


def test_median_prunes_a_hopeless_xgboost_classifier_on_accuracy_mid_fit(svc: Service) -> None:
    # the shipped taxi's rate code (93% standard) from the trip: at 0.3 the first trial is above 0.97 from its first
    # round and early-stops (on mlogloss) after a few dozen; at 1e-4 every round predicts the standard rate, so its
    # accuracy sits below the median from round 1 and the pruner stops it. Unpruned it would run all 5,000
    # rounds (seconds: at 500 the fit could end in about as long as the prune takes to land).
    features = [f for f in TAXI_FEATURES if f != "rate_code"]
    base = {**taxi_request("tune-xgb-acc"), "framework": "xgboost",
            "params": {"learning_rate": 0.1, "max_depth": 6, "num_round": 5000, "early_stopping_rounds": 10,
                       "num_workers": 1}}  # fmt: skip
    base["dataset"] = {**base["dataset"], "features": features, "label": "rate_code", "task": "classification"}
    space = {"params.learning_rate": {"type": "choice", "values": [0.3, 1e-4]}}
    body = {"name": "tune-xgb-acc", "base": base, "space": space, "sampler": "grid", "pruner": "median",
            "trials": 2, "parallel": 1, "metric": "accuracy"}  # fmt: skip
    done = wait_final(svc.client, _post(svc, body)["id"], timeout=300)
    assert done["status"] == "SUCCEEDED", done["error"]
    assert done["result"]["mode"] == "max"
    board = {r["trial"]: r for r in done["result"]["leaderboard"]}
    assert board[0]["state"] == "COMPLETE" and board[0]["rounds"] < 5000 and board[0]["metric"] > 0.95, board
    assert board[1]["state"] == "PRUNED" and 1 <= board[1]["rounds"] < 5000, board
    assert done["result"]["best"]["trial"] == 0
    pruned = svc.client.get(f"/jobs/{board[1]['job_id']}").json()
    assert pruned["status"] == "CANCELLED" and pruned["model"] is None
    assert any(w.startswith(f"pruned by tune job {done['id']} at round") for w in pruned["warnings"]), pruned
    rounds = svc.client.get(f"/jobs/{pruned['id']}/metrics", params={"key": "validation_accuracy"}).json()["metrics"]
    steps = [m["step"] for m in rounds]
    assert steps == list(range(1, len(steps) + 1)) and board[1]["rounds"] <= len(steps) < 5000, steps[-5:]
    # the completed trial's curve at its kept round is its result's accuracy (1 - merror on the same trees and rows)
    kept = board[0]["rounds"]
    curve = svc.client.get(f"/jobs/{board[0]['job_id']}/metrics", params={"key": "validation_accuracy"}).json()
    at_kept = [m["value"] for m in curve["metrics"] if m["step"] == kept]
    assert at_kept == [pytest.approx(board[0]["metric"], abs=1e-9)], (kept, curve["metrics"][-12:])


def test_a_spark_ml_grid_runs_every_trial_to_the_end_even_with_a_pruner(svc: Service) -> None:
    # Spark ML fits report no intermediate values: a median pruner is accepted and stops none of them, not even the
    # over-regularised third one
    base = taxi_request("tune-lr", algorithm="linear_regression", regParam=0.0)
    space = {"params.regParam": {"type": "choice", "values": [0.0, 1.0, 100.0]}}
    body = {"name": "tune-lr", "base": base, "space": space, "sampler": "grid", "pruner": "median", "trials": 3,
            "parallel": 1}  # fmt: skip
    done = wait_final(svc.client, _post(svc, body)["id"], timeout=300)
    assert done["status"] == "SUCCEEDED", done["error"]
    result = done["result"]
    assert result["metric"] == "rmse" and result["mode"] == "min" and result["states"] == {"COMPLETE": 3}, result
    board = result["leaderboard"]
    assert len(board) == 3 and {r["trial"] for r in board} == {0, 1, 2}
    assert [r["metric"] for r in board] == sorted(r["metric"] for r in board)  # mode min
    children = _children(svc, done["id"])
    for row in board:
        assert row["state"] == "COMPLETE" and row["epochs"] is None and row["model"]["name"] == "tune-lr", row
        assert row["params"] == {"params.regParam": [0.0, 1.0, 100.0][row["trial"]]}
        child = children[row["trial"]]
        assert child["id"] == row["job_id"] and child["status"] == "SUCCEEDED" and not child["warnings"], child
        assert child["request"]["params"]["regParam"] == row["params"]["params.regParam"]
        assert child["result"]["validation"]["rmse"] == row["metric"]
    assert board[-1]["trial"] == 2 and board[-1]["metric"] > board[0]["metric"] * 1.5, board  # regParam 100: worst
    best = result["best"]
    assert best["trial"] == board[0]["trial"] and best["model"] == board[0]["model"]
    model = next(m for m in svc.client.get("/models").json()["items"] if m["name"] == "tune-lr")
    assert len(model["versions"]) == 3 and model["aliases"] == {"best": best["model"]["version"]}
    version = svc.client.get(f"/models/tune-lr/versions/{best['model']['version']}").json()
    assert version["job_id"] == best["job_id"]


def test_bad_searches_are_422_naming_the_field_and_write_nothing(svc: Service) -> None:
    before = len(svc.client.get("/jobs", params={"limit": 500}).json()["items"])
    lr = {"training.optimizer.learning_rate": {"type": "uniform", "low": 1e-3, "high": 1e-2}}
    cases = [
        ({"space": {"training.optimizer.momentum": {"type": "uniform", "low": 0, "high": 1}}},
         "space.training.optimizer.momentum"),
        ({"space": {"network.layers.3.units": {"type": "int", "low": 1, "high": 4}}}, "space.network.layers.3.units"),
        ({"space": {"training.epochs": {"type": "int", "low": 1, "high": 10**9}}}, "space.training.epochs"),
        ({"space": {"training.batch_size_per_worker": {"type": "choice", "values": [64, 0]}}},
         "space.training.batch_size_per_worker"),
        ({"space": lr, "trials": 21}, "trials"),
        ({"space": lr, "parallel": 3}, "parallel"),
        ({"space": lr, "sampler": "grid"}, "sampler"),
        ({"space": lr, "metric": "auc_roc"}, "metric"),  # no trial reports it: each would end without a metric
        ({"space": lr, "metric": "rmse"}, "metric"),  # a torch classifier reports loss and accuracy
        # audit (2026-12-06): a choice on a missing path was a 500; a uniform over an integer field passed at its
        # whole ends and every trial failed; a search over the name registered the trials elsewhere and then failed
        ({"space": {"training.foo.bar": {"type": "choice", "values": [1, 2]}}}, "space.training.foo.bar"),
        ({"space": {"network.layers.5.units": {"type": "choice", "values": [16, 32]}}}, "space.network.layers.5.units"),
        ({"space": {"network.layers.0.activation.x": {"type": "choice", "values": ["relu"]}}},
         "space.network.layers.0.activation.x"),
        ({"space": {"training.epochs": {"type": "uniform", "low": 1, "high": 3}}}, "space.training.epochs"),
        ({"space": {"name": {"type": "choice", "values": ["n1", "n2"]}}}, "space.name"),
        ({"space": {"framework": {"type": "choice", "values": ["torch"]}}}, "space.framework"),
        ({"space": {"training.epochs": {"type": "int", "low": 1, "high": 20_001}}, "sampler": "grid"}, "space"),
        # walkthrough: the inner path changed the outer choice's value in place; its trials failed
        ({"space": {"network.layers": {"type": "choice", "values": [[{"type": "output", "units": 10,
          "activation": "softmax", "loss": "cross_entropy"}]]},
          "network.layers.0.units": {"type": "choice", "values": [16, 32]}}}, "space.network.layers.0.units"),
        # Ray Tune user's walkthrough: 00 named layer 0 a second time; a stepped uniform's 1.5 epochs failed trials
        ({"space": {"network.layers.00.units": {"type": "int", "low": 16, "high": 32}}},
         "space.network.layers.00.units"),
        ({"space": {"training.epochs": {"type": "uniform", "low": 1, "high": 3, "step": 0.5}}, "sampler": "grid",
          "trials": 5}, "space.training.epochs"),
        # tuning walkthrough: a float range over a whole-number field inside network (or params) was a 202, then
        # every trial failed; a grid of two axes of 10,000 values was listed (10^8 points) before it was refused
        ({"space": {"network.layers.0.units": {"type": "loguniform", "low": 8, "high": 64}}},
         "space.network.layers.0.units"),
        ({"space": {"network.layers.0.units": {"type": "uniform", "low": 8, "high": 64, "step": 8}}},
         "space.network.layers.0.units"),
        ({"space": {"network.layers.0.units": {"type": "int", "low": 1, "high": 10_000},
                    "training.batch_size_per_worker": {"type": "int", "low": 1, "high": 10_000}}, "sampler": "grid"},
         "trials"),
    ]  # fmt: skip
    for search, loc in cases:
        response = svc.client.post("/tune", json=_tune("tune-bad", **search))
        assert response.status_code == 422, (loc, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["errors"][0]["loc"] == loc, response.json()
    momentum = svc.client.post("/tune", json=_tune("tune-bad", **cases[0][0])).json()
    assert "give base.training.optimizer.momentum a value first" in momentum["detail"], momentum
    units = svc.client.post("/tune", json=_tune("tune-bad", **cases[-3][0])).json()
    assert 'use type "int"' in units["detail"] and units["inner"] == "network.layers[0].units", units
    # inner: the field inside the /train body, whichever check refused it (it said base.training.batch_size_per_worker)
    for search, inner in ((cases[3][0], "training.batch_size_per_worker"), (cases[2][0], "training.epochs")):
        problem = svc.client.post("/tune", json=_tune("tune-bad", **search)).json()
        assert problem["inner"] == inner, problem
    undescribed = _tune("tune-bad", space=lr)
    del undescribed["base"]["dataset"]
    problem = svc.client.post("/tune", json=undescribed).json()
    assert (problem["errors"][0]["loc"], problem.get("inner")) == ("base.dataset", "dataset"), problem
    broken = _tune("tune-bad", space=lr)
    broken["base"]["dataset"]["uri"] = "datasets/digits/nothing.parquet"
    response = svc.client.post("/tune", json=broken)
    assert response.status_code == 422 and response.json()["errors"][0]["loc"] == "base.dataset.uri", response.text
    unlabelled = _tune("tune-bad", space=lr)
    unlabelled["base"]["dataset"]["label"] = "no_such_column"
    response = svc.client.post("/tune", json=unlabelled)
    assert response.status_code == 422 and response.json()["errors"][0]["loc"] == "base.dataset.label", response.text
    assert len(svc.client.get("/jobs", params={"limit": 500}).json()["items"]) == before


def test_cancel_stops_the_running_trial_and_keeps_the_finished_one(svc: Service) -> None:
    space = {"training.epochs": {"type": "choice", "values": [1, 500]}}
    tune = _post(svc, _tune("tune-cancel", space=space, sampler="grid", trials=2, parallel=1, metric="accuracy"))
    deadline = time.monotonic() + 240
    children: dict[int, dict[str, Any]] = {}
    while 1 not in children:
        assert time.monotonic() < deadline, f"the second trial never started: {children}"
        time.sleep(0.3)
        children = _children(svc, tune["id"])
    running = svc.wait(children[1]["id"], {"RUNNING"})
    assert svc.client.get(f"/jobs/{children[0]['id']}").json()["status"] == "SUCCEEDED"  # parallel 1: it ended
    response = svc.client.post(f"/jobs/{tune['id']}/cancel")
    assert response.status_code == 202, response.text
    done = wait_final(svc.client, tune["id"], timeout=120)
    assert done["status"] == "CANCELLED", done
    # the leaderboard so far stays: it was the result while the search ran (a cancelled search had none)
    board = done["result"]["leaderboard"]
    # and the running trial, once its cancel ended it (within the 10 s the tune waits), is there as CANCELLED
    assert done["result"]["partial"] and [(r["trial"], r["state"]) for r in board] == [
        (0, "COMPLETE"),
        (1, "CANCELLED"),
    ], done
    stopped = wait_final(svc.client, running["id"], timeout=120)
    assert stopped["status"] == "CANCELLED" and stopped["model"] is None
    kept = svc.client.get(f"/jobs/{children[0]['id']}").json()
    assert kept["status"] == "SUCCEEDED" and kept["model"]["name"] == "tune-cancel"
    assert svc.client.get(f"/models/tune-cancel/versions/{kept['model']['version']}").status_code == 200


def test_a_search_its_timeout_cuts_short_says_so(svc: Service) -> None:
    """The timeout cancels the trial still running; the result said nothing of it: every trial had "run"
    (review)."""
    space = {"training.epochs": {"type": "choice", "values": [1, 1000]}}
    body = _tune("tune-timeout", space=space, sampler="grid", trials=2, parallel=2, metric="accuracy",
                 timeout_minutes=0.75)  # fmt: skip
    body["base"]["training"]["batch_size_per_worker"] = 2  # about a second an epoch: 1,000 outlast the timeout
    tune = _post(svc, body)
    done = wait_final(svc.client, tune["id"], timeout=240)
    assert done["status"] == "SUCCEEDED", done["error"]
    result = done["result"]
    assert (result["trials"], result["trials_requested"], result["timed_out"]) == (2, 2, True), json.dumps(done)
    assert [(r["trial"], r["state"]) for r in result["leaderboard"]] == [(0, "COMPLETE"), (1, "CANCELLED")], result
    assert "timeout_minutes passed after 2 of the 2 trials, 1 of them cancelled by it" in " ".join(done["warnings"])
