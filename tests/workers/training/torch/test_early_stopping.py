"""Early stopping in the executor-side trainer, in real processes (gloo over loopback) without Spark: patience in
every mode, the time limit, the best epoch's weights registered bit for bit, and counters that survive a resume."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from tests.workers.training.torch.test_remote import _cfg, _splits
from workers.training.torch.checkpoint import WEIGHTS, final_dir, read_meta
from workers.training.torch.local import run_local
from workers.training.torch.spec import parse_early_stopping

pytestmark = pytest.mark.slow  # two spawned processes per run
ROWS = 128  # per worker: 8 steps of 16 an epoch


def _data() -> list[Any]:
    return _splits(rows=ROWS)


def _stopping(**settings: Any) -> dict[str, Any]:
    parsed = parse_early_stopping(settings, "classification")
    assert parsed is not None
    return parsed


def _ok(results: list[dict[str, Any]]) -> dict[str, Any]:
    for r in results:
        assert "exception" not in r and "error" not in r, r
    assert [r["replicas_identical"] for r in results] == [True, True]
    same = [{k: v for k, v in r["early_stopping"].items() if k != "training_minutes"} for r in results]
    assert same[0] == same[1]  # every rank decided the same (each measures the time on its own clock)
    return results[0]


def _bytes(path: Path) -> dict[str, bytes]:
    return {name: t.numpy().tobytes() for name, t in load_file(str(path)).items()}


@pytest.mark.parametrize("mode", ["gradient_sharing", "parameter_averaging", "allreduce"])
def test_a_tiny_learning_rate_stops_on_patience(tmp_path: Path, mode: str) -> None:
    cfg = _cfg(tmp_path, mode=mode, epochs=8, optimizer={"type": "sgd", "learning_rate": 1e-9},
               early_stopping=_stopping(patience=2, min_delta=1e-4))  # fmt: skip
    result = _ok(run_local(cfg, _data()))
    stopping = result["early_stopping"]
    assert stopping["stopped_early"] and stopping["stop_reason"] == "patience"
    assert stopping["epochs_run"] == 3 and stopping["best_epoch"] == 1  # epoch 1 set the score; 2 and 3 missed it
    assert stopping["best_score"] == pytest.approx(result["validation"]["loss"])
    assert result["steps"] == 3 * (ROWS // 16)
    assert not final_dir(tmp_path / "checkpoints", 4).exists()
    meta = read_meta(final_dir(tmp_path / "checkpoints", 3))
    assert meta["early_stopping"]["bad_epochs"] == 2 and meta["early_stopping"]["best_epoch"] == 1


def test_max_minutes_stops_on_time(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, epochs=20, early_stopping=_stopping(patience=100, max_minutes=1e-6))
    stopping = _ok(run_local(cfg, _data()))["early_stopping"]
    assert stopping["stopped_early"] and stopping["stop_reason"] == "max_minutes"
    assert stopping["epochs_run"] == 1 and stopping["training_minutes"] > 1e-6


def test_the_registered_weights_are_the_best_checkpoints_bit_for_bit(tmp_path: Path) -> None:
    """``mode: max`` on val_loss makes the first epoch (the highest loss) the best one, so the job stops after
    epoch 3 and registers epoch 1's weights, which differ from the last epoch's."""
    cfg = _cfg(tmp_path, epochs=10, early_stopping=_stopping(metric="val_loss", mode="max", patience=2))
    result = _ok(run_local(cfg, _data()))
    stopping = result["early_stopping"]
    assert (stopping["best_epoch"], stopping["epochs_run"], stopping["registered_epoch"]) == (1, 3, 1)
    assert stopping["restored_best"] and stopping["last_validation"] != result["validation"]
    registered = _bytes(tmp_path / "model" / WEIGHTS)
    assert registered == _bytes(final_dir(tmp_path / "checkpoints", 1) / WEIGHTS)
    assert registered != _bytes(final_dir(tmp_path / "checkpoints", 3) / WEIGHTS)
    assert result["validation"] == read_meta(final_dir(tmp_path / "checkpoints", 1))["early_stopping"]["best_metrics"]

    kept = dataclasses.replace(cfg, model_dir=str(tmp_path / "last"),
                               early_stopping={**cfg.early_stopping, "restore_best": False})  # type: ignore[dict-item]  # fmt: skip
    last = _ok(run_local(dataclasses.replace(kept, checkpoint_dir=str(tmp_path / "c2")), _data()))
    assert not last["early_stopping"]["restored_best"] and last["early_stopping"]["registered_epoch"] == 3
    assert _bytes(tmp_path / "last" / WEIGHTS) == _bytes(final_dir(tmp_path / "checkpoints", 3) / WEIGHTS)


def test_resume_keeps_counting_and_restores_a_best_epoch_from_before_the_resume(tmp_path: Path) -> None:
    stopping = _stopping(metric="val_loss", mode="max", patience=2)
    straight = _ok(run_local(_cfg(tmp_path / "a", epochs=10, early_stopping=stopping), _data()))
    _ok(run_local(_cfg(tmp_path / "b", epochs=2, early_stopping=stopping), _data()))
    resumed = _ok(run_local(_cfg(tmp_path / "c", epochs=10, early_stopping=stopping, start_epoch=2,
                                 resume_dir=str(final_dir(tmp_path / "b" / "checkpoints", 2))), _data()))  # fmt: skip
    assert resumed["early_stopping"]["epochs_run"] == straight["early_stopping"]["epochs_run"] == 3
    assert resumed["early_stopping"]["best_epoch"] == 1 and resumed["early_stopping"]["restored_best"]
    assert _bytes(tmp_path / "c" / "model" / WEIGHTS) == _bytes(tmp_path / "a" / "model" / WEIGHTS)
    assert resumed["steps"] == straight["steps"] // 3  # one epoch trained after the resume

    # resumed past its patience: stops before training anything, with the best weights
    done = _ok(run_local(_cfg(tmp_path / "d", epochs=10, early_stopping=stopping, start_epoch=3,
                              resume_dir=str(final_dir(tmp_path / "a" / "checkpoints", 3))), _data()))  # fmt: skip
    assert done["steps"] == 0 and done["early_stopping"]["stop_reason"] == "patience"
    assert _bytes(tmp_path / "d" / "model" / WEIGHTS) == _bytes(tmp_path / "a" / "model" / WEIGHTS)
