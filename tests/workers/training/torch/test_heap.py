"""The heap kept while a rank trains (workers/training/torch/heap.py): large tensors stop being fresh mmaps inside,
glibc's behaviour is back outside, and the switch turns it off."""

from __future__ import annotations

import ctypes
import platform

import pytest
import torch

from workers.training.torch import heap

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only"
)


class _MallInfo2(ctypes.Structure):
    _NAMES = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")
    _fields_ = [(name, ctypes.c_size_t) for name in (*_NAMES, "keepcost")]


def _mmapped_bytes() -> int:
    """What malloc holds in blocks of their own mmap (``hblkhd``)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    return int(libc.mallinfo2().hblkhd)


def _mmapped_while_holding(numel: int) -> int:
    """How many more bytes malloc holds in mmapped blocks while a tensor of ``numel`` floats is alive."""
    before = _mmapped_bytes()
    tensor = torch.ones(numel)
    during = _mmapped_bytes()
    del tensor
    return during - before


def test_inside_a_large_tensor_comes_from_the_heap_and_outside_from_its_own_mmap() -> None:
    big = 10 << 20  # 40 MB: above any mmap threshold glibc picks by itself (32 MiB at most)
    assert _mmapped_while_holding(big) >= 4 * big
    with heap.kept() as active:
        assert active
        assert _mmapped_while_holding(big) == 0
        assert _mmapped_while_holding(big) == 0  # freed into the heap and taken from it again
    assert _mmapped_while_holding(big) >= 4 * big  # glibc's thresholds are back


def test_switched_off_it_leaves_malloc_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKTRAIN_KEEP_HEAP", "0")
    big = 10 << 20
    with heap.kept() as active:
        assert not active
        assert _mmapped_while_holding(big) >= 4 * big
