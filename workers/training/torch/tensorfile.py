"""Write a safetensors file with direct I/O: the checkpoint's tensors go to the disk without passing the page cache.

A buffered write of a checkpoint costs what the kernel spends finding fresh page-cache pages, not the copy, and
checkpoints are kept, so every one needs new pages. On the 2-core VM the benchmarks run on (``python -m
bench.checkpoint``, 2026-12-05), writing the 9.7M MLP's 155 MB checkpoint again and again, every one kept:
``safetensors.torch.save_file`` 0.43 s a checkpoint, the same bytes with ``O_DIRECT`` through one reused,
page-aligned buffer 0.09 s; two ranks at once 0.41 against 0.14 s. With each file deleted before the next was
written the two ways cost the same (0.11 and 0.12 s): the cost is the page cache growing (on this VM, most likely
the first touch of guest memory), which a direct write never does. In the trainer, a 4-epoch job of that MLP spent
1.65 s in its checkpoints, 0.57 s with direct writes. Nothing reads a checkpoint back soon (a resume or the copy to
the store does, from the disk), so the cache gains nothing from holding it.

The file is an ordinary safetensors file (8-byte little-endian header length, JSON header padded with spaces to 8
bytes, the tensors' bytes back to back, largest elements first so that every tensor starts aligned to its element
size, as safetensors itself orders them) and loads with ``safetensors.torch.load_file``. Direct I/O needs every
write aligned to the disk's blocks, so the bytes are staged through a 4 MiB buffer aligned to the page, and the
last block's padding is cut off with ``ftruncate``. Where a filesystem refuses ``O_DIRECT`` (EINVAL on open or on
the first write), where the platform has none, with a dtype safetensors has no name for, or with
``SPARKTRAIN_DIRECT_IO=0``, :func:`save` falls back to ``safetensors.torch.save_file``. The caller fsyncs and
renames, as for any file it writes; a full disk raises ``OSError`` (ENOSPC) from the write.

Executor-side: stdlib, torch and safetensors.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import struct
import threading
from pathlib import Path

import torch
from safetensors.torch import save_file

STAGE = 4 << 20
"""The staging buffer, a multiple of any block size direct I/O asks for (512 B to 4 KiB)."""
BLOCK = 4096

DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}

_local = threading.local()  # one staging buffer per thread, so that two threads may write at once


def direct_io_enabled() -> bool:
    return hasattr(os, "O_DIRECT") and os.environ.get("SPARKTRAIN_DIRECT_IO", "1") != "0"


def save(tensors: dict[str, torch.Tensor], path: str | Path) -> str:
    """Write ``tensors`` (CPU, contiguous) to ``path`` as safetensors; returns how: ``direct`` or ``buffered``."""
    if direct_io_enabled() and all(t.dtype in DTYPES for t in tensors.values()):
        try:
            _save_direct(tensors, Path(path))
            return "direct"
        except _Refused:
            Path(path).unlink(missing_ok=True)
    save_file(tensors, str(path))
    return "buffered"


class _Refused(Exception):
    """The filesystem does not take direct I/O here: write the file the ordinary way."""


def _header(tensors: dict[str, torch.Tensor]) -> tuple[bytes, list[torch.Tensor]]:
    names = sorted(tensors, key=lambda k: (-tensors[k].element_size(), k))
    header: dict[str, dict[str, object]] = {}
    offset = 0
    for name in names:
        t = tensors[name]
        size = t.numel() * t.element_size()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, [tensors[n] for n in names]


def _stage() -> tuple[mmap.mmap, torch.Tensor]:
    if getattr(_local, "buffer", None) is None:
        buffer = mmap.mmap(-1, STAGE)  # anonymous: aligned to the page
        _local.buffer, _local.view = buffer, torch.frombuffer(buffer, dtype=torch.uint8)
    return _local.buffer, _local.view


def _save_direct(tensors: dict[str, torch.Tensor], path: Path) -> None:
    head, ordered = _header(tensors)
    total = len(head) + sum(t.numel() * t.element_size() for t in ordered)
    buffer, view = _stage()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise _Refused from exc
        raise
    written = 0

    def flush(n: int) -> None:
        nonlocal written
        try:
            done = os.write(fd, memoryview(buffer)[:n])
        except OSError as exc:
            if exc.errno == errno.EINVAL and written == 0:
                raise _Refused from exc
            raise
        if done != n:  # a short write to a regular file: the disk filled up between blocks
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        written += n

    try:
        fill = 0
        for source in [torch.frombuffer(bytearray(head), dtype=torch.uint8)] + [
            t.reshape(-1).view(torch.uint8) for t in ordered if t.numel()
        ]:
            position, size = 0, source.numel()
            while position < size:
                take = min(STAGE - fill, size - position)
                view[fill : fill + take].copy_(source[position : position + take])
                fill, position = fill + take, position + take
                if fill == STAGE:
                    flush(STAGE)
                    fill = 0
        if fill:
            padded = -(-fill // BLOCK) * BLOCK
            view[fill:padded].zero_()
            flush(padded)
        os.ftruncate(fd, total)
    finally:
        os.close(fd)
