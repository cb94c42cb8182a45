"""A process killed (SIGKILL) at random moments while it writes checkpoints with the trainer's own functions:
whatever a kill leaves behind (in the middle of writing, renaming, or removing an old checkpoint as retention
does), a directory under a final name ``epoch-<n>`` is always complete and loads, and a later run that publishes
the same epoch again clears the debris of the dead one."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from workers.training.torch import checkpoint as ckpt

# Writes epoch after epoch (from argv[2]) into argv[1], two ranks, every tensor filled with the epoch number, and
# keeps the newest two final directories. Each checkpoint is ~12 MB, so most kills land in the middle of a write.
WRITER = """
import sys, uuid
from pathlib import Path
import torch
from workers import storage
from workers.training.torch import checkpoint as ckpt

root, epoch = Path(sys.argv[1]), int(sys.argv[2])
model = torch.nn.Linear(1024, 1024)
run = uuid.uuid4().hex[:8]
while True:
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(epoch)
    partial = ckpt.partial_dir(root, epoch, run)
    ckpt.write_meta(partial, {"epoch": epoch, "world_size": 2})
    ckpt.save_weights(partial, model)
    for rank in (0, 1):
        state = {"optimizer.0.exp_avg": torch.full((1024, 1024), float(epoch))}
        ckpt.save_rank_state(partial, rank, state, {"epoch": epoch})
    ckpt.publish(root, epoch, run)
    for old in root.glob("epoch-*"):
        if old.name.split("-")[1].isdigit() and int(old.name.split("-")[1]) < epoch - 1:
            storage.discard_dir(old)  # as retention does
    print(epoch, flush=True)
    epoch += 1
"""


def _epoch(path: Path) -> int:
    return int(path.name.split("-")[1].split(".")[0])


def _check_complete(directory: Path) -> None:
    """Everything a resume reads is there, whole, and from the same epoch."""
    n = _epoch(directory)
    assert not list(directory.glob("*.tmp")), f"{directory} holds unfinished files"
    assert ckpt.read_meta(directory)["epoch"] == n
    weights = load_file(str(directory / ckpt.WEIGHTS))
    assert set(weights) == {"weight", "bias"} and all(bool((t == n).all()) for t in weights.values())
    for rank in (0, 1):
        state = ckpt.load_rank_state(directory, rank)
        assert state is not None, f"{directory} lacks rank {rank}"
        tensors, extra = state
        assert extra["epoch"] == n and bool((tensors["optimizer.0.exp_avg"] == n).all())


@pytest.mark.slow
def test_a_kill_at_any_moment_leaves_no_incomplete_checkpoint_under_a_final_name(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    root.mkdir()
    rng = random.Random(7)
    interrupted = 0
    next_epoch = 1
    for _ in range(6):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(next_epoch)], stdout=subprocess.PIPE)
        assert writer.stdout is not None
        first = writer.stdout.readline()  # one checkpoint published by this run: it is under way
        assert first.strip(), "the writer died before publishing anything"
        time.sleep(rng.uniform(0.0, 0.3))
        writer.send_signal(signal.SIGKILL)
        writer.wait(30)
        writer.stdout.close()

        finals = sorted((d for d in root.iterdir() if d.name.split("-")[1].isdigit()), key=_epoch)
        debris = [p for p in root.iterdir() if p not in finals] + list(root.glob("epoch-*/*.tmp"))
        interrupted += bool(debris)
        assert finals, "no complete checkpoint left"
        for directory in finals:
            _check_complete(directory)
        newest = _epoch(finals[-1])
        # what a dead run left is only ever for an epoch nobody published since (publishing clears it)
        assert all(_epoch(p) > newest for p in root.glob("epoch-*.partial*")), sorted(p.name for p in debris)
        next_epoch = newest + 1  # the next run writes again the epoch that was being written
    assert interrupted >= 1, "no kill landed while a checkpoint was being written: the test proved nothing"


@pytest.mark.parametrize("existing", [False, True])
def test_publish_replaces_an_unregistered_epoch_and_clears_dead_runs(tmp_path: Path, existing: bool) -> None:
    """A run that died after renaming ``epoch-2`` (but before the driver registered it), and another that died
    while writing it: the next run's ``epoch-2`` replaces the first and removes what the second left."""
    root = tmp_path / "checkpoints"
    if existing:
        old = ckpt.final_dir(root, 2)
        old.mkdir(parents=True)
        (old / ckpt.META).write_text(json.dumps({"epoch": 2, "run": "dead-1"}))
    dead = ckpt.partial_dir(root, 2, "dead-2")
    dead.mkdir(parents=True)
    (dead / "rank-1.tmp").write_bytes(b"\0" * 10)
    ckpt.write_meta(ckpt.partial_dir(root, 2, "live"), {"epoch": 2, "run": "live"})
    ckpt.save_weights(ckpt.partial_dir(root, 2, "live"), torch.nn.Linear(2, 2))
    target = ckpt.publish(root, 2, "live")
    assert target == ckpt.final_dir(root, 2)
    assert ckpt.read_meta(target)["run"] == "live"
    assert sorted(p.name for p in root.iterdir()) == ["epoch-2"]
