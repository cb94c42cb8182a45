"""Threshold-encoded update messages (DL4J's SharedTrainingMaster / Strom 2015), encode and decode.

A message is a 1-D ``torch.uint8`` CPU tensor: a 16-byte little-endian header

    int32 count | int32 N (parameter count) | float32 tau | int32 kind

followed by a payload that depends on ``kind``:

- ``SPARSE_INT32``: ``count`` little-endian int32, ``+(i + 1)`` for ``+tau`` and ``-(i + 1)`` for ``-tau``
  (1-based so that index 0 keeps its sign), strictly ascending in ``i``.
- ``SPARSE_COMPACT``: the same (index, sign) list as gap/sign LEB128 varints (see
  :mod:`workers.codecs.varint`: value = (i - previous - 1) << 1 | negative, previous starting at -1).
  Lossless, usually 1-2 bytes per index.
- ``BITMAP``: ``ceil(N / 16)`` little-endian uint32 words; in word ``w`` bit ``b`` (0..15) says element
  ``16w + b`` is sent and bit ``b + 16`` that it is negative. Every sent value is exactly ``±tau``.
  DL4J's bitmap has a third state (sign bit alone = ``-tau/2``, sent for ``-tau < r_i <= -tau/2``) with no
  positive counterpart. The residual keeps the difference, but during the bitmap phase (the first steps
  of training) negative updates reach the parameters earlier and in larger amounts than positive ones of
  the same size, a systematic downward push on every replica. We leave that state out: the update is
  symmetric, and a bitmap element means exactly what a sparse index means.

An empty message (fewer than 2 elements reached ``tau``; DL4J sends nothing then) is a bare header with
count 0 and a sparse kind. It still costs its 16 bytes in any accounting.

Encoding chooses the kind after counting: ``count >= ceil(N / bitmap_ratio)`` gives a bitmap (so for
N < 16 any message that is sent at all is a bitmap). With the default ratio 16 this is exactly where a
SPARSE_INT32 payload (4 bytes per element) stops being smaller than the bitmap (``4 * ceil(N / 16)`` bytes),
and it is DL4J's switch point. SPARSE_COMPACT is still smaller there (about 1 byte per index at that
density, so it stays smaller up to about N/4) but 2-3x slower to encode and decode than the bitmap at those
densities; ``bitmap_ratio=4`` trades that CPU for bytes.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import torch

from workers.codecs import bitmap, native
from workers.codecs.varint import decode_signed_indices, encode_signed_indices

__all__ = [
    "HEADER_BYTES",
    "MAX_PARAMETERS",
    "Encoded",
    "Header",
    "MessageKind",
    "MessageLike",
    "bitmap_min_count",
    "decode",
    "decode_accumulate",
    "encode_threshold",
    "read_header",
]

HEADER_BYTES = 16
MAX_PARAMETERS = 2**31 - 1
"""N must fit the int32 header field (and the 1-based signed int32 indices)."""

_HEADER = struct.Struct("<iifi")
_FLOAT32_MAX = float(np.finfo(np.float32).max)

MessageLike = torch.Tensor | npt.NDArray[np.uint8] | bytes | bytearray | memoryview


class MessageKind(IntEnum):
    SPARSE_INT32 = 0
    BITMAP = 1
    SPARSE_COMPACT = 2


@dataclass(frozen=True)
class Header:
    count: int
    n: int
    tau: float
    kind: MessageKind


@dataclass(frozen=True)
class Encoded:
    """One encoded step. ``count`` is the number of elements actually sent (0 for an empty message)."""

    message: torch.Tensor
    count: int
    kind: int
    n: int
    tau: float
    nbytes: int
    local: tuple[Any, ...] | None = field(default=None, repr=False, compare=False)
    """On the CPU, the message as the encoder knew it (the int8 steps of a bitmap, or a sparse message's indices
    and signs): :func:`decode_accumulate` applies an ``Encoded`` from these, bitwise as it would the bytes,
    without parsing what this worker just wrote."""

    @property
    def sparsity(self) -> float:
        """Fraction of the N parameters sent in this message (what the threshold algorithms consume)."""
        return self.count / self.n if self.n else 0.0


def bitmap_min_count(n: int, bitmap_ratio: int = 16) -> int:
    """Smallest count that is sent as a bitmap: ``ceil(n / bitmap_ratio)``."""
    return -(-n // bitmap_ratio)


def _float32_tau(tau: float) -> float:
    if isinstance(tau, bool) or not isinstance(tau, int | float):
        raise ValueError(f"tau must be a real number, got {type(tau).__name__}")
    if not math.isfinite(tau) or tau <= 0:
        raise ValueError(f"tau must be finite and > 0, got {tau!r}")
    if tau > _FLOAT32_MAX:
        raise ValueError(f"tau={tau!r} overflows float32")
    tau32 = float(np.float32(tau))
    if tau32 <= 0:
        raise ValueError(f"tau={tau!r} underflows to 0 in float32")
    return tau32


# CPU tensors go through numpy (it shares their memory): torch's CPU nonzero/masking kernels are several
# times slower. Tests set this to False to run the accelerator (torch) path on CPU tensors.
_NUMPY_ON_CPU = True
# Messages on the CPU are encoded and added by the C loops of workers.codecs.native when it can be built (bit for
# bit what numpy gives; a bitmap's payload is still checked by numpy). Tests set this to False to compare the two.
_NATIVE = True
# Dense numpy passes run over chunks of this many elements, so temporaries stay in cache and are reused
# instead of page-faulting fresh N-sized buffers (about 2x faster at N = 1e7). Must be a multiple of 16
# (chunks start on bitmap word boundaries).
_CHUNK = 1 << 18

_Payload = tuple[int, MessageKind, npt.NDArray[np.uint8], tuple[Any, ...] | None]
"""count, kind, payload, and what the CPU encoder already knows of the decoded message (:attr:`Encoded.local`)."""


def _use_numpy(tensor: torch.Tensor) -> bool:
    return _NUMPY_ON_CPU and tensor.device.type == "cpu"


def encode_threshold(
    residual: torch.Tensor,
    tau: float,
    *,
    index_coding: Literal["compact", "int32"] = "compact",
    bitmap_ratio: int = 16,
) -> Encoded:
    """Encode every element with ``|r_i| >= tau`` as ``±tau`` and subtract what was sent from ``residual``.

    ``residual`` is a 1-D float32 tensor on any device and is modified in place (``r_i -= sign(r_i) * tau``
    for each sent element, nothing else), so no residual mass is lost. ``tau`` is rounded to float32 first,
    and that value is the one compared, subtracted and written in the header (``Encoded.tau``). Only the
    indices and signs (or the packed bitmap) leave the residual's device. NaN elements are never sent.
    """
    if not isinstance(residual, torch.Tensor):
        raise ValueError(f"residual must be a torch.Tensor, got {type(residual).__name__}")
    if residual.dtype != torch.float32:
        raise ValueError(f"residual must be float32, got {residual.dtype}")
    if residual.dim() != 1:
        raise ValueError(f"residual must be 1-D, got shape {tuple(residual.shape)}")
    n = residual.numel()
    if n > MAX_PARAMETERS:
        raise ValueError(f"residual has {n} elements; at most {MAX_PARAMETERS} fit a message")
    tau32 = _float32_tau(tau)
    if index_coding not in ("compact", "int32"):
        raise ValueError(f"index_coding must be 'compact' or 'int32', got {index_coding!r}")
    if isinstance(bitmap_ratio, bool) or not isinstance(bitmap_ratio, int) or bitmap_ratio < 1:
        raise ValueError(f"bitmap_ratio must be an int >= 1, got {bitmap_ratio!r}")
    sparse_kind = MessageKind.SPARSE_COMPACT if index_coding == "compact" else MessageKind.SPARSE_INT32
    local: tuple[Any, ...] | None = None
    if n < 2:
        count, kind, payload = 0, sparse_kind, np.empty(0, dtype=np.uint8)
    elif _use_numpy(residual):
        count, kind, payload, local = _encode_numpy(residual.detach().numpy(), tau32, sparse_kind, bitmap_ratio)
    else:
        count, kind, payload, local = _encode_torch(residual.detach(), tau32, sparse_kind, bitmap_ratio)
    buf = np.empty(HEADER_BYTES + payload.size, dtype=np.uint8)
    buf[:HEADER_BYTES] = np.frombuffer(_HEADER.pack(count, n, tau32, int(kind)), dtype=np.uint8)
    buf[HEADER_BYTES:] = payload
    return Encoded(
        message=torch.from_numpy(buf), count=count, kind=kind, n=n, tau=tau32, nbytes=int(buf.size), local=local
    )


def _sparse_payload(
    indices: npt.NDArray[np.int64], negative: npt.NDArray[np.bool_], kind: MessageKind
) -> npt.NDArray[np.uint8]:
    if kind == MessageKind.SPARSE_COMPACT:
        return encode_signed_indices(indices, negative)
    signed = (indices + 1).astype("<i4")
    signed[negative] *= -1
    return signed.view(np.uint8)


# Dense updates avoid branches (np.where, masked ufuncs) on random masks: a step s in {-1, 0, +1} times
# tau is exact, and subtracting +0.0 leaves every element (-0.0 included) bit for bit as it was.


def _encode_numpy(r: npt.NDArray[np.float32], tau32: float, sparse_kind: MessageKind, bitmap_ratio: int) -> _Payload:
    lib = native.library() if _NATIVE else None
    cap = bitmap_min_count(r.size, bitmap_ratio)
    if lib is not None and r.flags.c_contiguous and cap > 2:  # (a handful of elements: numpy, below)
        found = np.empty(cap + native.BLOCK, dtype=np.int32)
        count = int(lib.st_scan(r.ctypes.data, r.size, tau32, found.ctypes.data, cap))
        if count < 2:
            return 0, sparse_kind, np.empty(0, dtype=np.uint8), None
        if count < cap:  # sparse: every index found; taken and coded in one more loop over them
            negative_sent = np.empty(count, dtype=np.bool_)
            payload = np.empty(5 * count, dtype=np.uint8)  # a gap of an index below 2**31 takes at most 5 bytes
            size = lib.st_take(r.ctypes.data, found.ctypes.data, count, tau32, int(sparse_kind),
                               negative_sent.ctypes.data, payload.ctypes.data)  # fmt: skip
            return count, sparse_kind, payload[:size], (found[:count].astype(np.int64), negative_sent)
        steps = np.empty(r.size, dtype=np.int8)  # at least a bitmap's count (st_scan stopped there): the residual
        payload = np.empty(4 * bitmap_min_count(r.size), dtype=np.uint8)  # is untouched so far
        count = int(lib.st_bitmap(r.ctypes.data, r.size, tau32, payload.ctypes.data, steps.ctypes.data))
        return count, MessageKind.BITMAP, payload, (steps,)
    tau = np.float32(tau32)
    positive, negative = np.greater_equal(r, tau), np.less_equal(r, -tau)  # NaN is in neither
    count = int(np.count_nonzero(positive)) + int(np.count_nonzero(negative))
    if count < 2:
        return 0, sparse_kind, np.empty(0, dtype=np.uint8), None
    if count >= bitmap_min_count(r.size, bitmap_ratio):
        steps = np.subtract(positive.view(np.int8), negative.view(np.int8))
        bitmap.subtract_steps(r, steps, float(tau), _CHUNK)
        return count, MessageKind.BITMAP, bitmap.pack_numpy(positive, negative), (steps,)
    indices = np.flatnonzero(np.bitwise_or(positive, negative, out=positive))
    values = r[indices]
    r[indices] = values - np.copysign(tau, values)
    negative_sent = values < 0
    return count, sparse_kind, _sparse_payload(indices, negative_sent, sparse_kind), (indices, negative_sent)


def _encode_torch(residual: torch.Tensor, tau32: float, sparse_kind: MessageKind, bitmap_ratio: int) -> _Payload:
    tau = torch.tensor(tau32, dtype=torch.float32, device=residual.device)
    mask = (residual >= tau) | (residual <= -tau)
    count = int(torch.count_nonzero(mask))
    if count < 2:
        return 0, sparse_kind, np.empty(0, dtype=np.uint8), None
    if count >= bitmap_min_count(residual.numel(), bitmap_ratio):
        negative = mask & (residual < 0)
        step = mask.to(torch.int8) - 2 * negative.to(torch.int8)
        residual.sub_(step.to(torch.float32) * tau)
        return count, MessageKind.BITMAP, bitmap.pack_torch(mask, negative), None
    indices = torch.nonzero(mask).squeeze(1)
    values = residual.index_select(0, indices)
    negative = values < 0
    residual.index_copy_(0, indices, values - torch.copysign(tau, values))
    one_based = indices + 1
    signed = torch.where(negative, -one_based, one_based).to(torch.int32).cpu().numpy()
    return count, sparse_kind, _sparse_payload(np.abs(signed).astype(np.int64) - 1, signed < 0, sparse_kind), None


def _as_numpy(message: MessageLike) -> npt.NDArray[np.uint8]:
    if isinstance(message, torch.Tensor):
        if message.dtype != torch.uint8 or message.dim() != 1:
            raise ValueError(
                f"message must be a 1-D uint8 tensor, got {message.dtype} with shape {tuple(message.shape)}"
            )
        return np.ascontiguousarray(message.detach().cpu().numpy())
    if isinstance(message, np.ndarray):
        if message.dtype != np.uint8 or message.ndim != 1:
            raise ValueError(f"message must be a 1-D uint8 array, got {message.dtype} with shape {message.shape}")
        return np.ascontiguousarray(message)
    if isinstance(message, bytes | bytearray | memoryview):
        return np.frombuffer(message, dtype=np.uint8)
    raise ValueError(f"message must be a uint8 tensor, array or bytes, got {type(message).__name__}")


def _parse_header(data: npt.NDArray[np.uint8]) -> Header:
    if data.size < HEADER_BYTES:
        raise ValueError(f"message of {data.size} bytes is shorter than the {HEADER_BYTES}-byte header")
    count, n, tau, kind = _HEADER.unpack(data[:HEADER_BYTES].tobytes())
    if n < 0:
        raise ValueError(f"header N={n} is negative")
    if not 0 <= count <= n:
        raise ValueError(f"header count={count} is outside [0, N={n}]")
    if not (math.isfinite(tau) and tau > 0):
        raise ValueError(f"header tau={tau!r} is not a finite positive number")
    try:
        parsed_kind = MessageKind(kind)
    except ValueError:
        known = ", ".join(f"{k.value} ({k.name})" for k in MessageKind)
        raise ValueError(f"unknown message kind {kind}; known kinds: {known}") from None
    return Header(count=count, n=n, tau=tau, kind=parsed_kind)


def read_header(message: MessageLike) -> Header:
    """Parse and check the 16-byte header (known kind, ``0 <= count <= N``, finite ``tau > 0``)."""
    return _parse_header(_as_numpy(message))


def _sparse_indices(
    header: Header, payload: npt.NDArray[np.uint8]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """``(indices, negative)`` of a sparse message, checked against the header."""
    count, n = header.count, header.n
    if header.kind == MessageKind.SPARSE_COMPACT:
        indices, negative = decode_signed_indices(payload, count)
        if count and int(indices[-1]) >= n:
            raise ValueError(f"index {int(indices[-1])} is out of range for N={n}")
        return indices, negative
    if payload.size != 4 * count:
        raise ValueError(f"SPARSE_INT32 payload has {payload.size} bytes, expected 4 * {count}")
    signed = payload.view("<i4").astype(np.int64)
    magnitude = np.abs(signed)
    if count:
        if int(magnitude.min()) < 1 or int(magnitude.max()) > n:
            raise ValueError(f"SPARSE_INT32 index out of range [1, N={n}] (zero or too large)")
        if count > 1 and bool((magnitude[1:] <= magnitude[:-1]).any()):
            raise ValueError("SPARSE_INT32 indices are not strictly ascending")
    return magnitude - 1, signed < 0


def decode_accumulate(
    messages: Iterable[MessageLike | Encoded], out: torch.Tensor, *, scale: float = 1.0, sum_bitmaps: bool = False
) -> None:
    """Add ``scale * decoded(message)`` for every message to ``out`` (1-D float32/64, any device), in order.

    Each element receives at most one exact ``±scale*tau`` addition per message (sparse indices are unique;
    a bitmap is one dense pass), in message order, so replicas that decode the same messages in the same
    order end bitwise identical, on CUDA as well (no atomics racing on an element). ``scale * tau`` is
    rounded once to ``out``'s dtype. Every message is checked (N equals ``out.numel()``, known kind, payload
    consistent with the header) and a bad one raises ValueError; messages before it have already been added.
    An :class:`Encoded` (a worker's own message) is applied from what its encoder kept (:attr:`Encoded.local`),
    with the same arithmetic, so the result is bitwise the one its bytes give.

    ``sum_bitmaps``: consecutive BITMAP messages are first summed per element (from +0.0, in message order) and
    their sum added once, one rounding per element instead of one per message: bitwise what decoding them into a
    zeroed buffer and adding that buffer gives. Consecutive bitmaps take one pass over ``out`` on the C path.
    """
    if not isinstance(out, torch.Tensor) or out.dim() != 1 or out.dtype not in (torch.float32, torch.float64):
        raise ValueError("out must be a 1-D float32 or float64 tensor")
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale!r}")
    out_np = out.detach().numpy() if _use_numpy(out) else None
    lib = native.library() if _NATIVE and out_np is not None and out_np.dtype == np.float32 else None
    run: bitmap.Run = []  # consecutive bitmaps wait here, then go in together (bitmap.add_run)

    def flush() -> None:
        if run:
            bitmap.add_run(out, run, lib=lib, sum_first=sum_bitmaps, chunk=_CHUNK)
            run.clear()

    try:
        _decode_into(messages, out, scale, out_np, lib, run, flush)
    finally:
        flush()


def _decode_into(
    messages: Iterable[MessageLike | Encoded],
    out: torch.Tensor,
    scale: float,
    out_np: npt.NDArray[Any] | None,
    lib: Any,
    run: bitmap.Run,
    flush: Callable[[], None],
) -> None:
    n_out = out.numel()
    for position, message in enumerate(messages):
        local = message.local if isinstance(message, Encoded) and out_np is not None else None
        try:
            if local is not None:
                assert isinstance(message, Encoded)
                header = Header(count=message.count, n=message.n, tau=message.tau, kind=MessageKind(message.kind))
            else:
                data = _as_numpy(message.message if isinstance(message, Encoded) else message)
                header = _parse_header(data)
            if header.n != n_out:
                raise ValueError(f"message is for N={header.n} parameters but out has {n_out}")
            coefficient = header.tau * scale
            if abs(coefficient) > torch.finfo(out.dtype).max:
                raise ValueError(f"scale * tau = {scale!r} * {header.tau!r} overflows {out.dtype}")
            checked_compact = False
            if local is None:
                payload = data[HEADER_BYTES:]
                if header.kind == MessageKind.BITMAP:
                    bitmap.check(header.n, header.count, payload)
                elif lib is not None and header.kind == MessageKind.SPARSE_COMPACT and header.count > 0:
                    checked_compact = lib.st_check(payload.ctypes.data, payload.size, header.count, header.n) == 0
                    if not checked_compact:  # numpy's decoder says what is wrong (or reads a code C does not)
                        indices, negative = _sparse_indices(header, payload)
                else:
                    indices, negative = _sparse_indices(header, payload)
            elif header.kind != MessageKind.BITMAP:
                indices, negative = local
        except ValueError as exc:
            raise ValueError(f"message {position}: {exc}") from None
        if header.count == 0:
            continue
        if header.kind == MessageKind.BITMAP:
            source = np.ascontiguousarray(local[0], dtype=np.int8) if local is not None else payload
            run.append((source, local is not None, coefficient))
            continue
        flush()
        if lib is not None and checked_compact:
            assert out_np is not None
            lib.st_add_compact(out_np.ctypes.data, payload.ctypes.data, header.count, np.float32(coefficient))
        elif lib is not None:
            assert out_np is not None
            index64 = np.ascontiguousarray(indices, dtype=np.int64)
            lib.st_add_local(out_np.ctypes.data, index64.ctypes.data, negative.ctypes.data, index64.size,
                             np.float32(coefficient))  # fmt: skip
        elif out_np is not None:
            values = np.full(indices.size, coefficient, dtype=out_np.dtype)
            values[negative] *= -1
            with np.errstate(over="ignore"):
                out_np[indices] += values
        else:
            values_t = torch.full((indices.size,), coefficient, dtype=out.dtype)
            values_t[torch.from_numpy(negative)] *= -1
            out.index_add_(0, torch.from_numpy(indices).to(out.device), values_t.to(out.device))


def decode(
    message: MessageLike,
    n: int,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """The update one message carries, as a dense tensor of length ``n``."""
    out = torch.zeros(n, dtype=dtype, device=device)
    decode_accumulate([message], out)
    return out
