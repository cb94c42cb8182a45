"""The heap kept while a rank trains (workers/training/torch/heap.py): large tensors stop being fresh mmaps inside,
glibc's behaviour is back outside, and the switch turns it off.

Each measurement runs in a fresh interpreter: in the pytest process, free chunks left in the heap by earlier tests
can serve a 40 MB tensor without any mmap whatever the thresholds are (CI saw exactly that once)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import TypedDict

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only"
)

ROOT = Path(__file__).resolve().parents[4]

_MEASURE = """
import ctypes, json
import torch
from workers.training.torch import heap

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2

def mmapped_while_holding(numel):
    before = libc.mallinfo2().hblkhd
    tensor = torch.ones(numel)
    during = libc.mallinfo2().hblkhd
    del tensor
    return during - before

big = 10 << 20  # 40 MB: above any mmap threshold glibc picks by itself (32 MiB at most)
out = {"before": mmapped_while_holding(big)}
with heap.kept() as active:
    out["active"] = active
    out["inside"] = [mmapped_while_holding(big), mmapped_while_holding(big)]
out["after"] = mmapped_while_holding(big)
print(json.dumps(out))
"""

BIG_BYTES = 4 * (10 << 20)


class _Measured(TypedDict):
    before: int
    active: bool
    inside: list[int]
    after: int


def _measure(**env: str) -> _Measured:
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: _Measured = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_inside_a_large_tensor_comes_from_the_heap_and_outside_from_its_own_mmap() -> None:
    out = _measure(SPARKTRAIN_KEEP_HEAP="1")
    assert out["before"] >= BIG_BYTES
    assert out["active"] is True
    assert out["inside"] == [0, 0]  # the second one is freed into the heap and taken from it again
    assert out["after"] >= BIG_BYTES  # glibc's thresholds are back


def test_switched_off_it_leaves_malloc_alone() -> None:
    out = _measure(SPARKTRAIN_KEEP_HEAP="0")
    assert out["active"] is False
    assert out["inside"][0] >= BIG_BYTES
