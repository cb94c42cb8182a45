"""Safetensors files written with direct I/O (workers/training/torch/tensorfile.py): what safetensors reads back."""

from __future__ import annotations

import errno
import json
import os
import struct
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from workers.training.torch import tensorfile


def _tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "b.big": torch.randn(3 * tensorfile.STAGE // 4 + 17, generator=g),  # crosses the staging buffer twice
        "a.matrix": torch.randn(33, 7, generator=g, dtype=torch.float64),
        "half": torch.randn(5, generator=g).to(torch.float16),
        "brain": torch.randn(3, 3, generator=g).to(torch.bfloat16),
        "step": torch.tensor(12.0),  # 0-dim
        "empty": torch.zeros(0, 4),
        "flags": torch.tensor([True, False, True]),
        "counts": torch.arange(11, dtype=torch.int64),
        "ints": torch.arange(-3, 4, dtype=torch.int32),
        "shorts": torch.arange(5, dtype=torch.int16),
        "bytes": torch.arange(9, dtype=torch.uint8),
        "signed": torch.arange(-4, 4, dtype=torch.int8),
    }


def _same(loaded: dict[str, torch.Tensor], original: dict[str, torch.Tensor]) -> None:
    assert set(loaded) == set(original)
    for name, tensor in original.items():
        assert loaded[name].dtype == tensor.dtype, name
        assert loaded[name].shape == tensor.shape, name
        assert torch.equal(loaded[name], tensor), name


def test_a_direct_write_loads_with_safetensors_bit_for_bit(tmp_path: Path) -> None:
    tensors = _tensors()
    path = tmp_path / "t.safetensors"
    assert tensorfile.save(tensors, path) == "direct"
    _same(load_file(str(path)), tensors)
    # no padding left at the end: header length, header, then exactly the tensors' bytes
    (length,) = struct.unpack("<Q", path.read_bytes()[:8])
    assert length % 8 == 0
    assert path.stat().st_size == 8 + length + sum(t.numel() * t.element_size() for t in tensors.values())


def test_every_tensor_starts_aligned_to_its_element_size(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    tensorfile.save(_tensors(), path)
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    size = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
    for entry in header.values():
        assert (8 + length + entry["data_offsets"][0]) % size[entry["dtype"]] == 0


def test_overwriting_a_longer_file_leaves_only_the_new_one(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    tensorfile.save(_tensors(), path)
    small = {"x": torch.arange(10.0)}
    tensorfile.save(small, path)
    _same(load_file(str(path)), small)


def test_switched_off_it_writes_the_ordinary_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKTRAIN_DIRECT_IO", "0")
    tensors = _tensors()
    assert tensorfile.save(tensors, tmp_path / "t.safetensors") == "buffered"
    _same(load_file(str(tmp_path / "t.safetensors")), tensors)


def test_a_filesystem_that_refuses_direct_io_gets_an_ordinary_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def refusing(path: str | Path, flags: int, *args: int) -> int:  # what tmpfs before Linux 6.6 answers
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(tensorfile.os, "open", refusing)
    tensors = _tensors()
    assert tensorfile.save(tensors, tmp_path / "t.safetensors") == "buffered"
    _same(load_file(str(tmp_path / "t.safetensors")), tensors)


def test_threads_writing_at_once_each_get_their_own_file(tmp_path: Path) -> None:
    results: dict[int, str] = {}

    def write(i: int) -> None:
        results[i] = tensorfile.save(_tensors(i), tmp_path / f"{i}.safetensors")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {0: "direct", 1: "direct", 2: "direct"}
    for i in range(3):
        _same(load_file(str(tmp_path / f"{i}.safetensors")), _tensors(i))


def test_a_full_disk_is_an_oserror_with_enospc(small_disk: Path) -> None:
    with pytest.raises(OSError) as raised:
        tensorfile.save({"x": torch.zeros(2 << 20)}, small_disk / "t.safetensors")  # 8 MB into 2 MB
    assert raised.value.errno == errno.ENOSPC
