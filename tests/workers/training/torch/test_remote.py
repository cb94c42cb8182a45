"""The executor-side trainer in real processes (gloo over loopback), without Spark: modes, replica identity,
exact resume, failures every rank agrees on, devices, and what the shipped function drags along."""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from workers.training.torch.checkpoint import WEIGHTS, final_dir
from workers.training.torch.config import DataLayout, SharingConfig, TrainerConfig
from workers.training.torch.data import Split
from workers.training.torch.local import run_local, run_local_many
from workers.training.torch.remote import DeviceError, select_device

MLP = {
    "input_shape": [8],
    "layers": [
        {"type": "dense", "units": 32, "activation": "relu"},
        {"type": "dropout", "rate": 0.1},
        {"type": "output", "units": 3, "activation": "softmax", "loss": "cross_entropy"},
    ],
}


def _blobs(n: int, seed: int) -> Split:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    centers = rng.normal(0, 3, (3, 8)) if seed < 0 else np.random.default_rng(0).normal(0, 3, (3, 8))
    x = centers[y] + rng.normal(0, 1.0, (n, 8))
    return Split(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.int64))


def _splits(world: int = 2, rows: int = 400) -> list[tuple[Split, Split]]:
    return [(_blobs(rows, 10 + r), _blobs(100, 100 + r)) for r in range(world)]


def _cfg(tmp_path: Path, **changes: object) -> TrainerConfig:
    cfg = TrainerConfig(
        job_id="test",
        network=MLP,
        optimizer={"type": "adam", "learning_rate": 0.01},
        mode="gradient_sharing",
        sharing=SharingConfig(),
        averaging_frequency=3,
        epochs=3,
        batch_size=16,
        num_workers=2,
        seed=3,
        device="cpu",
        data=DataLayout(
            features=("x",), array_column=True, labels=("y",), task="classification", num_classes=3, input_shape=(8,)
        ),
        checkpoint_dir=str(tmp_path / "checkpoints"),
        model_dir=str(tmp_path / "model"),
        collective_timeout_s=60,
    )
    return dataclasses.replace(cfg, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["gradient_sharing", "parameter_averaging", "allreduce"])
def test_modes_train_and_keep_replicas_identical(tmp_path: Path, mode: str) -> None:
    results = run_local(_cfg(tmp_path, mode=mode), _splits())
    assert all("exception" not in r for r in results), results
    assert [r["replicas_identical"] for r in results] == [True, True]
    assert results[0]["checksum"] == results[1]["checksum"]
    assert results[0]["validation"]["accuracy"] > 0.9
    assert results[0]["steps"] == 3 * (400 // 16)
    assert (tmp_path / "model" / WEIGHTS).exists()
    if mode == "gradient_sharing":
        dense = results[0]["dense_bytes_per_step"]
        assert results[0]["bytes_sent"] / results[0]["steps"] < dense / 10  # compressed
        assert results[0]["threshold"]["type"] == "adaptive"
        assert results[0]["codec"] == "c"  # the C loops ran (workers.codecs.native), not numpy
    if mode == "allreduce":
        assert results[0]["bytes_sent"] == results[0]["steps"] * results[0]["dense_bytes_per_step"]


def test_parameter_averagings_epoch_end_average_is_counted(tmp_path: Path) -> None:
    """Averaging less often than once an epoch still averages at each epoch's end: weights and Adam's two moments,
    three dense buffers per epoch, on the codec's count and on the wire (they were left out: 0 bytes per step)."""
    results = run_local(_cfg(tmp_path, mode="parameter_averaging", averaging_frequency=1000, epochs=2), _splits())
    assert all("exception" not in r for r in results), results
    dense = results[0]["dense_bytes_per_step"]
    assert [r["bytes_sent"] for r in results] == [2 * 3 * dense] * 2
    assert all(r["wire_bytes"] >= 2 * 3 * dense for r in results), results  # a ring all-reduce sends 2(W-1)/W of it


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(tmp_path: Path) -> None:
    straight = run_local(_cfg(tmp_path / "a", epochs=4), _splits())
    first = run_local(_cfg(tmp_path / "b", epochs=2), _splits())
    resumed = run_local(
        _cfg(tmp_path / "c", epochs=4, resume_dir=str(final_dir(tmp_path / "b" / "checkpoints", 2)), start_epoch=2),
        _splits(),
    )
    for r in (*straight, *first, *resumed):
        assert "exception" not in r, r
    assert resumed[0]["steps"] == straight[0]["steps"] // 2
    assert resumed[0]["checksum"] == straight[0]["checksum"]
    a = (tmp_path / "a" / "model" / WEIGHTS).read_bytes()
    c = (tmp_path / "c" / "model" / WEIGHTS).read_bytes()
    assert a == c


def test_resume_in_another_mode_or_with_another_optimizer(tmp_path: Path) -> None:
    """A gradient-sharing checkpoint keeps an optimizer state per worker: all-reduce resumes every replica from rank
    0's (it failed as REPLICAS_DIVERGED); another optimizer starts fresh (Adam's state in SGD failed at its first
    step with KeyError 'momentum')."""
    first = run_local(_cfg(tmp_path / "b", epochs=2), _splits())
    assert all("exception" not in r for r in first), first
    resume = {"epochs": 3, "resume_dir": str(final_dir(tmp_path / "b" / "checkpoints", 2)), "start_epoch": 2}
    allreduce, sgd = run_local_many(
        [
            _cfg(tmp_path / "c", mode="allreduce", **resume),
            _cfg(tmp_path / "d", optimizer={"type": "sgd", "learning_rate": 0.05}, **resume),
        ],
        _splits(),
    )
    for results in (allreduce, sgd):
        assert all("exception" not in r and "error" not in r for r in results), results
        assert [r["replicas_identical"] for r in results] == [True, True]
        assert results[0]["validation"]["accuracy"] > 0.9


def test_resume_with_another_threshold_algorithm_starts_the_threshold_again(tmp_path: Path) -> None:
    """An adaptive checkpoint resumed with a fixed threshold (or the other way) failed on every executor with
    "threshold state is for type 'adaptive', not 'fixed'" (walkthrough): the threshold now starts again."""
    first = run_local(_cfg(tmp_path / "b", epochs=2), _splits())
    assert all("exception" not in r for r in first), first
    resume = {"epochs": 3, "resume_dir": str(final_dir(tmp_path / "b" / "checkpoints", 2)), "start_epoch": 2}
    fixed = SharingConfig(threshold_algorithm={"type": "fixed", "threshold": 0.05})
    results = run_local(_cfg(tmp_path / "c", sharing=fixed, **resume), _splits())
    assert all("exception" not in r and "error" not in r for r in results), results
    assert results[0]["threshold"]["threshold"] == 0.05 and results[0]["replicas_identical"]


def test_what_a_resume_says_of_the_checkpoints_gradient_sharing_state() -> None:
    from workers.training.torch.snapshots import sharing_change

    planned = SharingConfig(threshold_algorithm={"type": "adaptive", "initial_threshold": 0.01},
                            planned_initial_threshold=True)  # fmt: skip
    meta = {"mode": "gradient_sharing", "threshold_algorithm": planned.threshold_algorithm, "threshold_planned": True}
    state = {"type": "adaptive", "threshold": 0.03, "last_sparsity": None, "steps": 40}

    def change(cfg: TrainerConfig, meta: dict[str, object] = meta) -> tuple[list[str], bool]:
        extra = {"threshold": dict(state)}
        notes = sharing_change(meta, cfg, {"residual": torch.zeros(3)}, extra)
        return notes, "threshold" in extra  # kept: the checkpoint's threshold goes on

    cfg = _cfg(Path("/nonexistent"), sharing=planned)
    assert change(cfg) == ([], True)  # the same request again: the checkpoint's threshold goes on
    given = SharingConfig(threshold_algorithm={"type": "adaptive", "initial_threshold": 0.05})
    explicit = dataclasses.replace(cfg, sharing=given)
    notes, kept = change(explicit)  # a first threshold the request sets: it was ignored
    assert not kept and notes == ["the threshold starts again at initial_threshold 0.05, as the request sets it (the "
                                  "checkpoint's continued otherwise)"]  # fmt: skip
    same = {"mode": "gradient_sharing", "threshold_algorithm": explicit.sharing.threshold_algorithm}
    assert change(explicit, same) == ([], True)  # set to what the checkpoint was trained with
    notes, kept = change(
        dataclasses.replace(cfg, sharing=SharingConfig(threshold_algorithm={"type": "target_sparsity"}))
    )
    assert not kept and notes[0].startswith("the threshold algorithm changed from adaptive to target_sparsity")
    (note,) = sharing_change(meta, _cfg(Path("/nonexistent"), mode="allreduce"), {"residual": torch.zeros(3)}, {})
    assert (
        note
        == "the checkpoint's residuals (updates its workers had not sent yet) are dropped: mode allreduce keeps none"
    )


def test_what_changed_in_the_optimizer_since_the_checkpoint() -> None:
    from workers.training.torch.snapshots import optimizer_change

    model = torch.nn.Linear(3, 2)
    adam = {"type": "adam", "learning_rate": 0.01, "betas": (0.9, 0.999)}
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    saved = json_groups(optimizer)
    assert optimizer_change({**adam, "betas": [0.9, 0.999]}, adam, saved, optimizer) is None
    assert optimizer_change(None, adam, saved, optimizer) is None  # a checkpoint that did not record it
    assert optimizer_change(adam, {**adam, "type": "sgd"}, saved, optimizer) == "the optimizer changed from adam to sgd"
    assert optimizer_change(adam, {**adam, "learning_rate": 0.1}, saved, optimizer) == (
        "the optimizer's learning_rate changed"
    )
    decayed = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=1e-4)  # l2 is set outside the optimizer spec
    assert "weight decay" in str(optimizer_change(adam, adam, saved, decayed))


def json_groups(optimizer: torch.optim.Optimizer) -> list[dict[str, object]]:
    import json

    return list(json.loads(json.dumps(optimizer.state_dict()["param_groups"])))


def test_nan_loss_stops_every_rank_with_the_step(tmp_path: Path) -> None:
    # (gradient sharing caps each step at tau, so it would survive this learning rate)
    cfg = _cfg(tmp_path, mode="allreduce", optimizer={"type": "sgd", "learning_rate": 1e30})
    results = run_local(cfg, _splits())
    assert [r["error"]["reason"] for r in results] == ["NAN_LOSS", "NAN_LOSS"]
    assert "at step" in results[0]["error"]["message"]
    # in the first epoch there is no checkpoint (it said "the checkpoints written so far are kept")
    assert "no checkpoint was written yet (the first comes at the end of epoch 1)" in results[0]["error"]["message"]


def test_too_few_rows_on_a_worker(tmp_path: Path) -> None:
    splits = _splits()
    splits[1] = (_blobs(5, 7), splits[1][1])
    results = run_local(_cfg(tmp_path), splits)
    assert [r["error"]["reason"] for r in results] == ["EMPTY_PARTITION", "EMPTY_PARTITION"]


def test_device_selection() -> None:
    assert select_device("auto", []) == (torch.device("cpu"), None)
    assert select_device("cpu", []) == (torch.device("cpu"), None)
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="no GPU"):
            select_device("cuda", [])
        with pytest.raises(DeviceError, match="Spark gave this task GPU"):
            select_device("cuda", ["1"])
        device, warning = select_device("auto", ["1"])
        assert device == torch.device("cpu") and warning and "training on CPU" in warning
    else:
        assert select_device("auto", ["0"]) == (torch.device("cuda:0"), None)


def test_shipped_function_carries_no_service_code(tmp_path: Path) -> None:
    """The function Spark ships pulls in none of app, sqlalchemy, fastapi, celery."""
    from pyspark import cloudpickle

    from workers.training.torch.driver import shipped_function

    payload = tmp_path / "fn.pkl"
    payload.write_bytes(cloudpickle.dumps(shipped_function(_cfg(tmp_path).to_dict())))
    code = (
        "import pickle, sys;"
        f"fn = pickle.loads(open({str(payload)!r}, 'rb').read());"
        "import workers.training.torch.remote;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('app', 'sqlalchemy', 'fastapi', 'celery', 'starlette')];"
        "print(','.join(sorted(bad)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_a_barrier_task_runs_without_spark(tmp_path: Path) -> None:
    """The function Spark ships reads BarrierTaskContext; what it calls takes the task's place in the stage as plain
    values and ``all_gather``, so one task runs here, in a process that never imports pyspark."""
    import json

    import pyarrow as pa

    split = _blobs(64, 1)
    table = pa.table(
        {
            "x": pa.array(split.x.numpy().tolist(), pa.list_(pa.float32())),
            "y": split.y.numpy(),
            "_split": np.r_[np.zeros(48), np.ones(16)].astype(np.int32),
            "_row": np.arange(64),
        }
    )
    with pa.OSFile(str(tmp_path / "rows.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=20)
    (tmp_path / "cfg.json").write_text(json.dumps(_cfg(tmp_path, num_workers=1, epochs=1).to_dict()))
    code = (
        "import json, sys; import pyarrow as pa;"
        "from workers.training.torch.remote import barrier_partition;"
        "said = [];"
        "gather = lambda message: said.append(message) or [message];"
        "batches = pa.ipc.open_file(sys.argv[2]).read_all().to_batches();"
        "out = list(barrier_partition(iter(batches), json.load(open(sys.argv[1])), rank=0, world_size=1,"
        " host='127.0.0.1', cpus=1, gpu_addresses=[], all_gather=gather));"
        "result = json.loads(out[0].column(1)[0].as_py());"
        "print(json.dumps({'rank': out[0].column(0)[0].as_py(), 'steps': result['steps'], 'said': len(said),"
        " 'rows': result['rows'], 'pyspark': any(m.split('.')[0] == 'pyspark' for m in sys.modules)}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "cfg.json"), str(tmp_path / "rows.arrow")],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[4],
        timeout=300,
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    # 48 training rows in batches of 16, one epoch; rank 0 shares its port through all_gather once
    assert found == {"rank": 0, "steps": 3, "said": 1, "rows": 48, "pyspark": False}, out.stderr


@pytest.mark.parametrize("interval_s", [0.0, 3600.0])
def test_step_events_are_sampled_in_time_with_every_epochs_edges(tmp_path: Path, interval_s: float) -> None:
    """A worker sends a step's figures at most every ``metrics_interval_s`` and always at the first and last step of
    each epoch; each carries its running total of bytes sent (``wire_bytes_sent``), the sum of the steps' own."""
    from workers.training.torch.local import free_port
    from workers.training.torch.remote import run_training
    from workers.training.torch.report import NullReporter

    reporter = NullReporter()
    train, val = _splits(world=1)[0]
    cfg = _cfg(tmp_path, num_workers=1, epochs=2, metrics_interval_s=interval_s)
    result = run_training(cfg, rank=0, world_size=1, host="127.0.0.1", port=free_port(), train=train, val=val,
                          reporter=reporter)  # fmt: skip
    assert "error" not in result, result
    steps = [e for e in reporter.events if e["t"] == "step"]
    per_epoch = 400 // 16
    if interval_s == 0:
        assert [e["step"] for e in steps] == list(range(1, 2 * per_epoch + 1))
        sent = 0
        for e in steps:
            sent += e["wire_bytes"]
            assert e["wire_bytes_sent"] == sent
    else:
        assert [e["step"] for e in steps] == [1, per_epoch, per_epoch + 1, 2 * per_epoch]
        assert [e["epoch"] for e in steps] == [1, 1, 2, 2]
        assert all(a["wire_bytes_sent"] <= b["wire_bytes_sent"] for a, b in itertools.pairwise(steps))


def test_a_planned_first_threshold_is_the_one_step_times_the_runs_multiple(tmp_path: Path) -> None:
    """Left to the trainer, tau0 is picked from the planned steps (8 epochs of 25: 200 per worker, 1 + 9 * 112 / 572
    steps of tau0): bitwise the run with that tau0 given explicitly, not the one with one step; a resumed run keeps the
    threshold of its checkpoint and ends where the uninterrupted run does."""
    one_step = {"type": "adaptive", "initial_threshold": 0.01}
    planned = SharingConfig(threshold_algorithm=one_step, planned_initial_threshold=True)
    explicit = SharingConfig(threshold_algorithm={**one_step, "initial_threshold": 0.01 * (1 + 9 * 112 / 572)})
    runs = run_local_many(
        [
            _cfg(tmp_path / "planned", sharing=planned, epochs=8),
            _cfg(tmp_path / "explicit", sharing=explicit, epochs=8),
            _cfg(tmp_path / "one", sharing=SharingConfig(threshold_algorithm=one_step), epochs=8),
        ],
        _splits(),
    )
    for ranks in runs:
        assert all("exception" not in r for r in ranks), ranks
    assert runs[0][0]["checksum"] == runs[1][0]["checksum"] != runs[2][0]["checksum"]
    resumed = run_local(
        _cfg(tmp_path / "resumed", sharing=planned, epochs=8, start_epoch=6,
             resume_dir=str(final_dir(tmp_path / "planned" / "checkpoints", 6))),
        _splits(),
    )  # fmt: skip
    assert "exception" not in resumed[0], resumed
    assert resumed[0]["checksum"] == runs[0][0]["checksum"]
