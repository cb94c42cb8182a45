"""The driver's end of an xgboost fit's round reports: rounds become job metrics as they arrive, once each, the
history written at the end of the fit adds only the rounds that did not arrive, and the job's progress moves with
the rounds (counting those of a checkpoint the fit continued from) and never goes back."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.workers.training.xgboost.recorded import Recorded
from workers.context import MetricPoint
from workers.training.torch.report import SocketReporter
from workers.training.xgboost.remote import round_callback
from workers.training.xgboost.rounds import RoundReports, round_progress


def _wait(ctx: Recorded, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(ctx.points) < count and time.monotonic() < deadline:
        time.sleep(0.05)


def test_rounds_are_written_as_they_arrive_once_each_and_the_end_adds_only_the_missing_ones() -> None:
    ctx = Recorded()
    with RoundReports(ctx, "127.0.0.1", num_round=6) as reports:  # type: ignore[arg-type]
        host, port, token = reports.target
        reporter = SocketReporter(host, port, token, 0)
        for n in (1, 2, 2, 3):  # round 2 twice: a stage attempt run again
            reporter.send({"t": "round", "round": n, "metrics": {"validation_rmse": 10.0 - n, "train_rmse": 9.0 - n}})
        _wait(ctx, 6)  # written while the "fit" runs, before the listener closes
        assert sorted((p.key, p.step) for p in ctx.points) == [
            ("train_rmse", 1), ("train_rmse", 2), ("train_rmse", 3),
            ("validation_rmse", 1), ("validation_rmse", 2), ("validation_rmse", 3),
        ]  # fmt: skip
        reporter.send({"t": "round", "round": 4, "metrics": {"validation_rmse": 6.0}})
        reporter.close()
    assert ("validation_rmse", 4) in {(p.key, p.step) for p in ctx.points}  # the last one, read before closing
    history = [MetricPoint("validation_rmse", 10.0 - n, step=n) for n in range(1, 7)]
    assert [(p.key, p.step) for p in reports.missing(history)] == [("validation_rmse", 5), ("validation_rmse", 6)]


def test_a_connection_without_the_token_writes_nothing() -> None:
    ctx = Recorded()
    with RoundReports(ctx, "127.0.0.1", num_round=1) as reports:  # type: ignore[arg-type]
        host, port, _ = reports.target
        reporter = SocketReporter(host, port, "not-the-token", 0)
        reporter.send({"t": "round", "round": 1, "metrics": {"validation_rmse": 1.0}})
        reporter.close()
    assert ctx.points == []


@pytest.mark.parametrize("with_listener", [True, False])
def test_xgboost_training_reports_every_round_and_trains_without_a_listener(with_listener: bool) -> None:
    import xgboost

    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 3))
    y = x @ np.array([1.0, -2.0, 0.5])
    dtrain, dvalid = xgboost.DMatrix(x[:200], label=y[:200]), xgboost.DMatrix(x[200:], label=y[200:])
    ctx = Recorded()
    with RoundReports(ctx, "127.0.0.1", num_round=7) as reports:  # type: ignore[arg-type]
        target = reports.target
        if not with_listener:  # a port nobody listens on: training goes on, nothing is written
            with socket.socket() as free:
                free.bind(("127.0.0.1", 0))
                target = ("127.0.0.1", free.getsockname()[1], target[2])
        history: dict[str, dict[str, list[float]]] = {}
        booster = xgboost.train({"nthread": 1}, dtrain, num_boost_round=7, evals=[(dvalid, "validation")],
                                evals_result=history, verbose_eval=False,
                                callbacks=[round_callback(target)])  # fmt: skip
    assert booster.num_boosted_rounds() == 7
    streamed = {p.step: p.value for p in ctx.points if p.key == "validation_rmse"}
    if with_listener:
        assert streamed == {n + 1: pytest.approx(v) for n, v in enumerate(history["validation"]["rmse"])}
    else:
        assert streamed == {}


def test_progress_shows_the_rounds_done_and_never_goes_back() -> None:
    ctx = Recorded()
    with RoundReports(ctx, "127.0.0.1", num_round=10, low=0.05, high=0.85) as reports:  # type: ignore[arg-type]
        assert ctx.shown == [(0.05, "training: round 0 of 10")]  # before the first round ends
        host, port, token = reports.target
        reporter = SocketReporter(host, port, token, 0)
        for n in (1, 2, 3):
            reporter.send({"t": "round", "round": n, "metrics": {"validation_rmse": 10.0 - n}})
        _wait(ctx, 3)
        deadline = time.monotonic() + 10
        while ctx.shown[-1][1] != "training: round 3 of 10" and time.monotonic() < deadline:
            time.sleep(0.05)
        reporter.send({"t": "round", "round": 2, "metrics": {"validation_rmse": 8.0}})  # a stage attempt run again
        reporter.send({"t": "round", "round": 4, "metrics": {}})
        reporter.close()
    fractions = [f for f, _ in ctx.shown]
    assert fractions == sorted(fractions) and len(set(fractions)) == len(fractions)
    assert ctx.shown[-1] == (pytest.approx(0.05 + 0.8 * 4 / 10), "training: round 4 of 10")
    assert "training: round 3 of 10" in [m for _, m in ctx.shown]
    for fraction, message in ctx.shown:  # the message says where the bar is
        assert message is not None
        done = int(message.split()[2])
        assert fraction == pytest.approx(0.05 + 0.8 * done / 10)


@pytest.mark.parametrize(("done", "total", "shown"), [(0, 500, 0.05), (120, 500, 0.05 + 0.8 * 120 / 500),
                                                       (500, 500, 0.85), (600, 500, 0.85)])  # fmt: skip
def test_round_progress_is_the_share_of_rounds_done(done: int, total: int, shown: float) -> None:
    fraction, message = round_progress(done, total, 0.05, 0.85)
    assert fraction == pytest.approx(shown)
    assert message == f"training: round {min(done, total)} of {total}"


def test_a_fit_continued_from_a_checkpoint_counts_its_rounds() -> None:
    """xgboost continues from the checkpoint's booster: the rounds reported go on from its rounds, and the
    progress starts there rather than at 0."""
    import xgboost

    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 3))
    y = x @ np.array([1.0, -2.0, 0.5])
    dtrain, dvalid = xgboost.DMatrix(x[:200], label=y[:200]), xgboost.DMatrix(x[200:], label=y[200:])
    checkpoint = xgboost.train({"nthread": 1}, dtrain, num_boost_round=20)
    ctx = Recorded()
    with RoundReports(ctx, "127.0.0.1", num_round=50, resumed=20, low=0.05, high=0.85) as reports:  # type: ignore[arg-type]
        booster = xgboost.train({"nthread": 1}, dtrain, num_boost_round=30, evals=[(dvalid, "validation")],
                                verbose_eval=False, xgb_model=checkpoint,
                                callbacks=[round_callback(reports.target)])  # fmt: skip
    assert booster.num_boosted_rounds() == 50
    assert ctx.shown[0] == (pytest.approx(0.05 + 0.8 * 20 / 50), "training: round 20 of 50")
    assert ctx.shown[-1] == (pytest.approx(0.85), "training: round 50 of 50")
    fractions = [f for f, _ in ctx.shown]
    assert fractions == sorted(fractions) and len(set(fractions)) == len(fractions)
    assert sorted(p.step for p in ctx.points if p.key == "validation_rmse") == list(range(21, 51))


def test_shipped_callbacks_and_task_carry_no_service_code(tmp_path: Path) -> None:
    """What Spark ships for an xgboost fit (the one-worker task, the callbacks xgboost.spark pickles) pulls in none
    of app, sqlalchemy, fastapi, celery."""
    from pyspark import cloudpickle

    from workers.training.xgboost.remote import checkpoint_callback, single_worker

    target = ("127.0.0.1", 1, "token")
    task = single_worker(["a"], "y", None, "v", "regression", {}, 3, None, 1, (str(tmp_path), 1, "run"), None, target)
    payload = tmp_path / "fn.pkl"
    payload.write_bytes(cloudpickle.dumps([task, round_callback(target), checkpoint_callback(str(tmp_path), 1, "r")]))
    code = (
        "import pickle, sys;"
        f"fn = pickle.loads(open({str(payload)!r}, 'rb').read());"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('app', 'sqlalchemy', 'fastapi', 'celery', 'starlette')];"
        "print(','.join(sorted(bad)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
