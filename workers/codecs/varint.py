"""Vectorised LEB128 coding of sorted, signed index lists (the SPARSE_COMPACT payload).

Each index ``i_k`` (strictly ascending, ``i_k >= 0``) with sign flag ``neg_k`` becomes one unsigned value

    v_k = (i_k - i_{k-1} - 1) << 1 | neg_k,      with i_{-1} = -1,

i.e. the number of indices *skipped* since the previous one (so the first value is ``i_0`` itself and adjacent
indices cost a zero gap), with the sign in the low bit. ``v_k`` is written as unsigned LEB128: 7-bit groups,
least significant first, the high bit set on every byte but the last. Gaps below 64 take one byte, below 8192
two; an index gap of up to 2**31 (N <= 2**31 - 1) needs at most 5 bytes.

No per-element Python loop: encoding computes every value's byte length, then scatters one 7-bit group per
byte position (at most 10 passes, usually 1-3); decoding finds the terminator bytes (high bit clear), maps
every byte to its place in its code and sums the shifted groups (disjoint bits) as differences of prefix
sums.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["MAX_VARINT_BYTES", "decode_signed_indices", "encode_signed_indices", "encoded_size"]

MAX_VARINT_BYTES = 10
"""Longest LEB128 code of an unsigned 64-bit value."""

_GROUP_LIMITS = np.array([1 << (7 * k) for k in range(1, MAX_VARINT_BYTES)], dtype=np.uint64)


def _values(indices: npt.NDArray[np.int64], negative: npt.NDArray[np.bool_]) -> npt.NDArray[np.uint64]:
    idx = np.asarray(indices)
    neg = np.asarray(negative)
    if idx.ndim != 1 or neg.ndim != 1 or idx.shape != neg.shape:
        raise ValueError(
            f"indices and negative must be 1-D arrays of the same length, got shapes {idx.shape} and {neg.shape}"
        )
    if not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"indices must be integers, got dtype {idx.dtype}")
    if neg.dtype != np.bool_:
        raise ValueError(f"negative must be a bool array, got dtype {neg.dtype}")
    idx = idx.astype(np.int64, copy=False)
    if idx.size == 0:
        return np.empty(0, dtype=np.uint64)
    if idx[0] < 0:
        raise ValueError(f"indices must be >= 0, got {int(idx[0])}")
    gaps = np.empty(idx.size, dtype=np.int64)
    gaps[0] = idx[0]
    np.subtract(idx[1:], idx[:-1], out=gaps[1:])
    gaps[1:] -= 1
    if idx.size > 1 and int(gaps[1:].min()) < 0:
        raise ValueError("indices must be strictly ascending (sorted, no duplicates)")
    values = gaps.astype(np.uint64) << np.uint64(1)
    values |= neg.astype(np.uint64)
    return values


def _byte_lengths(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    return np.searchsorted(_GROUP_LIMITS, values, side="right").astype(np.int64) + 1


def encoded_size(indices: npt.NDArray[np.int64], negative: npt.NDArray[np.bool_]) -> int:
    """Number of bytes :func:`encode_signed_indices` would produce, without building the buffer."""
    return int(_byte_lengths(_values(indices, negative)).sum())


def encode_signed_indices(indices: npt.NDArray[np.int64], negative: npt.NDArray[np.bool_]) -> npt.NDArray[np.uint8]:
    """Code strictly ascending non-negative ``indices`` and their sign flags as gap/sign LEB128 bytes.

    Raises ValueError for unsorted or duplicate indices, negative indices or mismatched shapes.
    """
    values = _values(indices, negative)
    if values.size == 0:
        return np.empty(0, dtype=np.uint8)
    largest = int(values.max())
    max_len = max(1, -(-largest.bit_length() // 7))
    if max_len == 1:
        return values.astype(np.uint8)
    if largest < 1 << 32:  # the usual case (N < 2**31): half the memory traffic
        values = values.astype(np.uint32)
    # One row of max_len bytes per value (its 7-bit groups, continuation bits set), then the unused tail of
    # each row dropped by one boolean selection, which keeps row order.
    lengths = np.ones(values.size, dtype=np.uint8)
    for k in range(1, max_len):
        lengths += values >= values.dtype.type(1 << (7 * k))
    rows = np.empty((values.size, max_len), dtype=np.uint8)
    for k in range(max_len):
        group = rows[:, k]
        np.bitwise_and(values >> values.dtype.type(7 * k), values.dtype.type(0x7F), out=group, casting="unsafe")
        group |= (lengths > k + 1).view(np.uint8) << np.uint8(7)
    return rows[np.arange(max_len, dtype=np.uint8) < lengths[:, None]]


def decode_signed_indices(
    buf: npt.NDArray[np.uint8], count: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Inverse of :func:`encode_signed_indices`: ``(indices int64 ascending, negative bool)``.

    The buffer must hold exactly ``count`` complete codes and nothing else; anything else (truncated code,
    trailing bytes, a code longer than 10 bytes, a value or index that overflows 63 bits) raises ValueError.
    """
    data = np.asarray(buf)
    if data.ndim != 1 or data.dtype != np.uint8:
        raise ValueError(f"buf must be a 1-D uint8 array, got {data.dtype} with shape {data.shape}")
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if count == 0:
        if data.size:
            raise ValueError(f"expected an empty buffer for count 0, got {data.size} bytes")
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.bool_)
    ends = np.flatnonzero(data < 0x80)
    if ends.size != count:
        raise ValueError(f"buffer holds {ends.size} complete varints, expected {count}")
    if int(ends[-1]) != data.size - 1:
        raise ValueError(f"{data.size - 1 - int(ends[-1])} trailing byte(s) after the last varint")
    starts = np.empty(count, dtype=np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    max_len = int(lengths.max())
    if max_len > MAX_VARINT_BYTES:
        raise ValueError(f"varint of {max_len} bytes is longer than the {MAX_VARINT_BYTES}-byte maximum")
    if max_len == 1:
        values = data.astype(np.uint64)
    else:
        # A byte's place in its code is the run of continuation bytes just before it; the groups of one code
        # have disjoint bits, so its value is a difference of prefix sums (wrapping uint64 arithmetic is exact).
        continued = data >= 0x80
        run = np.ones(data.size, dtype=np.bool_)
        position = np.zeros(data.size, dtype=np.uint64)
        for k in range(1, max_len):
            run[k:] &= continued[:-k]
            run[:k] = False
            position += run
        groups = (data & np.uint8(0x7F)).astype(np.uint64) << (np.uint64(7) * position)
        sums = np.cumsum(groups, dtype=np.uint64)
        values = sums[ends]
        values[1:] -= sums[ends[:-1]]
        if max_len == MAX_VARINT_BYTES and bool((data[ends[lengths == MAX_VARINT_BYTES]] > 1).any()):
            raise ValueError("varint value overflows 64 bits")
    negative = (values & np.uint64(1)).astype(np.bool_)
    steps = (values >> np.uint64(1)) + np.uint64(1)
    positions = np.cumsum(steps, dtype=np.uint64)
    # Every step is in [1, 2**63], so a wrap-around always shows up as a decrease.
    if count > 1 and bool((positions[1:] <= positions[:-1]).any()):
        raise ValueError("decoded indices overflow 64 bits")
    if int(positions[-1]) > 1 << 63:
        raise ValueError("decoded indices overflow int64")
    indices = (positions - np.uint64(1)).astype(np.int64)
    return indices, negative
