"""The BITMAP payload's dense passes (layout in :mod:`workers.codecs.threshold`), on CPU (numpy, chunked) and on
any torch device.

On the CPU every pass is one of numpy's or torch's fastest kernels: comparisons into bool masks, ``packbits`` and
``unpackbits`` on contiguous planes, int8 adds, and the int8 steps widened by torch (several times faster than
numpy's int8 to float cast) and applied as ``out - magnitude * k`` with ``k`` in {-1, 0, +1}: the product is exact
and an element not sent gets ``- (+0.0)``, which leaves it bit for bit as it was (-0.0 included). Chunks of
``chunk`` elements (a multiple of 16) keep the temporaries in cache.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

__all__ = ["add_numpy", "add_steps", "add_torch", "pack_numpy", "pack_torch", "subtract_steps"]


def _words(n: int) -> int:
    return -(-n // 16)


def pack_numpy(positive: npt.NDArray[np.bool_], negative: npt.NDArray[np.bool_]) -> npt.NDArray[np.uint8]:
    """The payload: per little-endian uint32 word, 16 sent bits then 16 negative bits."""
    n = positive.size
    words = _words(n)
    planes = np.zeros((2, 16 * words), dtype=np.bool_)  # sent, negative; padded to whole words
    np.bitwise_or(positive, negative, out=planes[0, :n])
    planes[1, :n] = negative
    packed = np.packbits(planes, axis=1, bitorder="little").view("<u2")  # (2, words): 16 elements per half
    payload = np.empty((words, 2), dtype="<u2")
    payload[:, 0] = packed[0]
    payload[:, 1] = packed[1]
    return payload.view(np.uint8).reshape(-1)


def subtract_steps(r: npt.NDArray[np.float32], steps: npt.NDArray[np.int8], tau: float, chunk: int) -> None:
    """``r -= steps * tau`` (the encoder's residual update; ``steps`` is +1 for a sent positive, -1 negative)."""
    r_t = torch.from_numpy(r)
    for start in range(0, r.size, chunk):
        stop = min(start + chunk, r.size)
        r_t[start:stop].sub_(torch.from_numpy(steps[start:stop]).to(torch.float32), alpha=tau)


def _apply(out: torch.Tensor, k: npt.NDArray[np.int8], magnitude: float) -> None:
    out.sub_(torch.from_numpy(k).to(out.dtype), alpha=magnitude)


def add_steps(out: npt.NDArray[np.floating], steps: npt.NDArray[np.int8], coefficient: float, chunk: int) -> None:
    """Add ``coefficient * steps`` to ``out`` exactly as :func:`add_numpy` adds the message ``steps`` packs to."""
    out_t = torch.from_numpy(out)
    k = np.empty(min(chunk, out.size), dtype=np.int8)
    for start in range(0, out.size, chunk):
        stop = min(start + chunk, out.size)
        chunk_k = k[: stop - start]
        if coefficient >= 0:
            np.negative(steps[start:stop], out=chunk_k)  # 2 * negative - sent
        else:
            chunk_k[:] = steps[start:stop]
        _apply(out_t[start:stop], chunk_k, abs(coefficient))


def add_numpy(out: npt.NDArray[np.floating], payload: npt.NDArray[np.uint8], coefficient: float, chunk: int) -> None:
    """Add ``coefficient * decoded(payload)`` to ``out``."""
    out_t = torch.from_numpy(out)
    # The two planes (sent, negative) made contiguous first (N/4 bytes): numpy's int8 loops are only fast on
    # contiguous data.
    planes = np.ascontiguousarray(payload.view("<u2").reshape(-1, 2).T).view(np.uint8)
    for start in range(0, out.size, chunk):
        stop = min(start + chunk, out.size)
        byte_range = slice(start // 8, -(-stop // 8))
        sent = np.unpackbits(planes[0, byte_range], bitorder="little", count=stop - start).view(np.int8)
        k = np.unpackbits(planes[1, byte_range], bitorder="little", count=stop - start).view(np.int8)
        np.add(k, k, out=k)  # numpy does not vectorise an int8 shift
        if coefficient >= 0:
            np.subtract(k, sent, out=k)  # 2 * negative - sent
        else:
            np.subtract(sent, k, out=k)
        _apply(out_t[start:stop], k, abs(coefficient))


# Bitmap byte order, per little-endian uint32 word w: [sent 16w..16w+7, sent 16w+8..16w+15,
# negative 16w..16w+7, negative 16w+8..16w+15], least significant bit first.


def _bit_shifts(device: torch.device) -> torch.Tensor:
    return torch.arange(8, dtype=torch.uint8, device=device)


def pack_torch(sent: torch.Tensor, negative: torch.Tensor) -> npt.NDArray[np.uint8]:
    n = sent.numel()
    words = _words(n)
    bits = torch.zeros((2, words * 16), dtype=torch.uint8, device=sent.device)
    bits[0, :n] = sent
    bits[1, :n] = negative
    packed = (bits.view(2, words, 2, 8) << _bit_shifts(sent.device)).sum(dim=-1, dtype=torch.uint8)
    return packed.permute(1, 0, 2).reshape(words * 4).cpu().numpy()


def add_torch(out: torch.Tensor, payload: npt.NDArray[np.uint8], coefficient: float) -> None:
    n = out.numel()
    data = torch.from_numpy(payload.copy()).to(out.device).view(-1, 2, 2, 1)
    bits = ((data >> _bit_shifts(out.device)) & 1).to(torch.int8).reshape(-1, 2, 16)
    sent = bits[:, 0].reshape(-1)[:n]
    negative = bits[:, 1].reshape(-1)[:n]
    k = 2 * negative - sent if coefficient >= 0 else sent - 2 * negative
    magnitude = torch.tensor(abs(coefficient), dtype=out.dtype, device=out.device)
    out.sub_(k.to(out.dtype) * magnitude)


Run = list[tuple[npt.NDArray[Any], bool, float]]
"""Consecutive BITMAP messages: (the encoder's own int8 steps, or a payload; whether steps; the coefficient)."""

FUSED = 16
"""The most messages ``st_add_bitmaps`` takes in one pass."""


def add_run(out: torch.Tensor, run: Run, *, lib: Any, sum_first: bool, chunk: int) -> None:
    """Add ``coefficient * decoded`` of every message of ``run`` to ``out``, in order: one message at a time, or
    with ``sum_first`` their sum per element (from +0.0, in order) added once, as a zeroed buffer decoded into with
    the opposite coefficients and subtracted gives. With the C library (float32 on the CPU) in one pass over out,
    bit for bit the same."""
    if lib is not None and len(run) <= FUSED:
        k = len(run)
        sources = (ctypes.c_void_p * k)(*(source.ctypes.data for source, _, _ in run))
        steps_flags = (ctypes.c_int * k)(*(int(steps) for _, steps, _ in run))
        magnitudes = (ctypes.c_float * k)(*(abs(coefficient) for _, _, coefficient in run))
        negative = (ctypes.c_int * k)(*(int(coefficient < 0) for _, _, coefficient in run))
        out_np = out.detach().numpy()
        lib.st_add_bitmaps(out_np.ctypes.data, out_np.size, k, sources, steps_flags, magnitudes, negative,
                           int(sum_first))  # fmt: skip
        return
    target = torch.zeros_like(out) if sum_first else out
    sign = -1.0 if sum_first else 1.0
    for source, is_steps, coefficient in run:
        if target.device.type != "cpu":
            add_torch(target, source, sign * coefficient)
        elif is_steps:
            add_steps(target.detach().numpy(), source, sign * coefficient, chunk)
        else:
            add_numpy(target.detach().numpy(), source, sign * coefficient, chunk)
    if sum_first:
        out.sub_(target)


def _popcount16(values: npt.NDArray[np.uint32]) -> int:
    if hasattr(np, "bitwise_count"):
        return int(np.bitwise_count(values).sum())
    return int(np.unpackbits(values.astype("<u2").view(np.uint8)).sum())


def check(n: int, count: int, payload: npt.NDArray[np.uint8]) -> None:
    """ValueError unless ``payload`` is a well-formed BITMAP of ``n`` elements sending ``count`` of them."""
    words = -(-n // 16)
    if payload.size != 4 * words:
        raise ValueError(f"BITMAP payload has {payload.size} bytes, expected 4 * ceil(N/16) = {4 * words}")
    packed = payload.view("<u4")
    sent = packed & np.uint32(0xFFFF)
    negative = packed >> np.uint32(16)
    if bool((negative & ~sent).any()):
        raise ValueError("BITMAP has a sign bit set for an element that is not sent")
    used = n - 16 * (words - 1)
    if used < 16 and (int(sent[-1]) | int(negative[-1])) >> used:
        raise ValueError(f"BITMAP sets bits past N={n}")
    total = _popcount16(sent)
    if total != count:
        raise ValueError(f"BITMAP sends {total} elements but the header says count={count}")
