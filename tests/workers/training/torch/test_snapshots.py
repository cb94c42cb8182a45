"""Checkpoints written in the background (workers/training/torch/snapshots.py), two ranks in processes of their own
(gloo over loopback): what lands on disk is the state at the moment the checkpoint was taken, however training
changes it afterwards; rank 0 reports it only once every rank's part is published; a full disk is the same
STORAGE_FULL on every rank with nothing left under the checkpoint's name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from tests.workers.training.torch.test_remote import _cfg
from workers.training.torch.checkpoint import WEIGHTS, final_dir
from workers.training.torch.comm import Comm
from workers.training.torch.config import SharingConfig
from workers.training.torch.local import run_ranks
from workers.training.torch.modes import flatten_parameters, make_strategy
from workers.training.torch.report import NullReporter
from workers.training.torch.snapshots import Checkpoints


def _take_then_train_on(comm: Comm, root: str, inputs: int, outputs: int) -> dict[str, Any]:
    """Take epoch 1's checkpoint, then change everything it covers before the write can have finished."""
    torch.manual_seed(5)
    model = torch.nn.Linear(inputs, outputs)
    flat = flatten_parameters(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    sharing = SharingConfig()
    strategy = make_strategy("gradient_sharing", model, flat, optimizer, comm, sharing=sharing, averaging_frequency=1)
    model(torch.ones(4, inputs)).sum().backward()
    optimizer.step()
    cfg = dataclasses.replace(_cfg(Path(root)), run_id="run1", num_workers=comm.world_size)
    taken = {k: v.detach().clone() for k, v in model.state_dict().items()}
    moment = {k: v.clone() for k, v in optimizer.state_dict()["state"][0].items()}
    reporter = NullReporter()
    with Checkpoints(cfg, comm.rank, comm, reporter) as checkpoints:
        started = checkpoints.take(1, 7, model, optimizer, None, strategy, metrics={"accuracy": 0.5}, keep_epoch=None)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
        optimizer.step()  # the moments and the step count move on too
        finished = checkpoints.finish()
    return {
        "started": started,
        "finished": str(finished) if finished is not None else None,
        "taken": {k: v.tolist() for k, v in taken.items()},
        "moment": {k: v.tolist() for k, v in moment.items()},
        "events": reporter.events,
    }


def test_the_files_hold_the_state_when_taken_and_rank_0_reports_once_published(tmp_path: Path) -> None:
    results = run_ranks(_take_then_train_on, 2, str(tmp_path), 6, 3)
    assert all("exception" not in r for r in results), results
    directory = final_dir(tmp_path / "checkpoints", 1)
    assert [r["started"] for r in results] == [None, None]
    assert [r["finished"] for r in results] == [None, None]
    weights = load_file(str(directory / WEIGHTS))
    for name, values in results[0]["taken"].items():
        assert weights[name].tolist() == values, name  # not the parameters changed after take()
    for rank, r in enumerate(results):
        state = load_file(str(directory / f"rank-{rank}.safetensors"))
        for name, values in r["moment"].items():
            assert state[f"optimizer.0.{name}"].tolist() == values, (rank, name)
        assert (directory / f"rank-{rank}.json").exists()
    meta = json.loads((directory / "meta.json").read_text())
    assert (meta["epoch"], meta["global_step"], meta["world_size"]) == (1, 7, 2)
    assert [p.name for p in directory.parent.iterdir()] == ["epoch-1"]  # no partial directory left
    reported = [e for e in results[0]["events"] if e.get("t") == "checkpoint"]
    assert reported == [
        {"t": "checkpoint", "epoch": 1, "step": 7, "path": str(directory), "metrics": {"accuracy": 0.5},
         "keep_epoch": None}
    ]  # fmt: skip
    assert not [e for e in results[1]["events"] if e.get("t") == "checkpoint"]  # only rank 0 reports


def test_a_full_disk_fails_every_rank_alike_and_leaves_nothing_under_the_name(small_disk: Path) -> None:
    results = run_ranks(_take_then_train_on, 2, str(small_disk), 512, 1024)  # 2.1 MB of weights into 2 MB
    assert all("exception" not in r for r in results), results
    assert [r["started"] for r in results] == [None, None]  # the write fails in the background
    for r in results:
        assert r["finished"] is not None and r["finished"].startswith("STORAGE_FULL: "), r["finished"]
        assert not [e for e in r["events"] if e.get("t") == "checkpoint"]
    assert len({r["finished"] for r in results}) == 1  # one verdict, the same on every rank
    assert list((small_disk / "checkpoints").iterdir()) == []  # neither epoch-1 nor its partial directory
