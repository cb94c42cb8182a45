import contextlib
import math
import struct
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from workers.codecs import native
from workers.codecs import threshold as codec
from workers.codecs.threshold import (
    HEADER_BYTES,
    Encoded,
    MessageKind,
    bitmap_min_count,
    decode,
    decode_accumulate,
    encode_threshold,
    read_header,
)

# First calls into torch/numpy can exceed hypothesis's 200 ms deadline on a loaded CI machine.
NO_DEADLINE = settings(deadline=None)

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
PATHS = ("native", "numpy", "numpy_small_chunks", "torch")
ALL_PATHS = pytest.mark.parametrize("path", PATHS)


@contextlib.contextmanager
def _path(path: str) -> Iterator[None]:
    """CPU tensors normally go through the C loops for sparse messages ("native") and numpy in chunks of 2**18
    elements for the rest; "numpy" is numpy alone, "numpy_small_chunks" makes test-sized vectors cross chunk
    boundaries; "torch" runs the code that CUDA tensors use, on the CPU."""
    saved = codec._NUMPY_ON_CPU, codec._CHUNK, codec._NATIVE
    codec._NUMPY_ON_CPU = path != "torch"
    codec._CHUNK = 48 if path == "numpy_small_chunks" else saved[1]
    codec._NATIVE = path == "native"
    try:
        yield
    finally:
        codec._NUMPY_ON_CPU, codec._CHUNK, codec._NATIVE = saved


def test_the_c_codec_is_built_on_this_machine() -> None:
    """Else every "native" case below would silently test numpy twice."""
    assert native.library() is not None, native.failure()


SPARSE_KIND = {"compact": MessageKind.SPARSE_COMPACT, "int32": MessageKind.SPARSE_INT32}


@st.composite
def residual_and_tau(draw: st.DrawFn) -> tuple[np.ndarray, float]:
    """float32 vectors of 1..5000 elements (often N < 16 or not a multiple of 16) and a tau to test at."""
    if draw(st.booleans()):
        values = draw(
            hnp.arrays(
                np.float32,
                st.integers(1, 48),
                elements=st.floats(width=32, allow_nan=False, allow_infinity=False),
            )
        )
    else:
        n = draw(st.integers(1, 5000))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        shape = draw(st.sampled_from(["normal", "spiky", "wide", "ties", "zeros"]))
        if shape == "normal":
            values = rng.standard_normal(n) * draw(st.sampled_from([1e-6, 1e-2, 1.0, 1e3]))
        elif shape == "spiky":
            values = rng.standard_normal(n) * 1e-3
            spikes = rng.choice(n, size=min(n, draw(st.integers(0, 400))), replace=False)
            values[spikes] = rng.choice([-1.0, 1.0], spikes.size) * rng.uniform(1.0, 8.0, spikes.size)
        elif shape == "wide":
            values = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-30, 30, n)
        elif shape == "ties":
            values = rng.integers(-4, 5, n) * 0.25
        else:
            values = np.zeros(n)
        values = values.astype(np.float32)
    choice = draw(st.sampled_from(["element", "element", "log", "tiny", "huge"]))
    if choice == "element":
        # tau exactly equal to some |r_i|: that element must be sent (|r_i| >= tau).
        magnitude = float(abs(values[draw(st.integers(0, values.size - 1))]))
        tau = magnitude if magnitude > 0 else 1.0
    elif choice == "log":
        tau = 10.0 ** draw(st.floats(-44, 38))
    elif choice == "tiny":
        tau = float(np.finfo(np.float32).smallest_subnormal)
    else:
        tau = float(np.finfo(np.float32).max)
    return values, tau


def _check(old: np.ndarray, new: torch.Tensor, enc: Encoded, tau: float, index_coding: str, bitmap_ratio: int) -> None:
    """Full contract of one encode: fields, header, sent set, decoded values and residual bookkeeping."""
    n = old.size
    tau32 = np.float32(tau)
    over = np.abs(old) >= tau32
    k = int(over.sum())
    if k < 2:
        kind, count = SPARSE_KIND[index_coding], 0
    elif k >= bitmap_min_count(n, bitmap_ratio):
        kind, count = MessageKind.BITMAP, k
    else:
        kind, count = SPARSE_KIND[index_coding], k
    assert (enc.kind, enc.count, enc.n, enc.tau) == (kind, count, n, float(tau32))
    assert enc.sparsity == count / n
    message = enc.message
    assert message.dtype == torch.uint8 and message.dim() == 1 and message.device.type == "cpu"
    assert enc.nbytes == message.numel()
    header = read_header(message)
    assert (header.count, header.n, header.tau, header.kind) == (count, n, float(tau32), kind)
    payload = enc.nbytes - HEADER_BYTES
    if count == 0:
        assert payload == 0
    elif kind == MessageKind.BITMAP:
        assert payload == 4 * math.ceil(n / 16)
    elif kind == MessageKind.SPARSE_INT32:
        assert payload == 4 * count
    else:
        assert count <= payload <= 5 * count

    sent = over if count else np.zeros(n, dtype=bool)
    decoded = decode(message, n, dtype=torch.float64).numpy()
    np.testing.assert_array_equal(decoded[~sent], 0.0)
    np.testing.assert_array_equal(decoded[sent], np.sign(old[sent]).astype(np.float64) * float(tau32))

    after = new.numpy()
    np.testing.assert_array_equal(after[~sent], old[~sent])
    expected = old[sent] - np.sign(old[sent]) * tau32  # float32 arithmetic, one rounding
    np.testing.assert_array_equal(after[sent], expected)
    # decoded + new residual == old residual. Exact when tau <= |r_i| <= 2 tau (Sterbenz: r_i - tau is exact);
    # above that the one float32 rounding of r_i - tau can lose up to half an ulp of r_i (which is a few ulp
    # of tau while |r_i| stays within a few tau, as residual clipping keeps it). Nothing else is lost.
    reconstructed = after.astype(np.float64) + decoded
    error = np.abs(reconstructed - old.astype(np.float64))
    with np.errstate(over="ignore"):  # the spacing of float32 max is inf
        half_ulp = np.spacing(np.abs(old)).astype(np.float64) / 2
    assert (error <= half_ulp).all()
    small = sent & (np.abs(old).astype(np.float64) <= 2 * float(tau32))
    np.testing.assert_array_equal(reconstructed[small], old[small].astype(np.float64))


@ALL_PATHS
@settings(max_examples=250, deadline=None)
@given(
    residual_and_tau(),
    st.sampled_from(["compact", "int32"]),
    st.sampled_from([16, 16, 1, 3, 1000]),
)
def test_encode_decode_round_trip(
    path: str, case: tuple[np.ndarray, float], index_coding: str, bitmap_ratio: int
) -> None:
    old, tau = case
    residual = torch.from_numpy(old.copy())
    with _path(path):
        enc = encode_threshold(residual, tau, index_coding=index_coding, bitmap_ratio=bitmap_ratio)  # type: ignore[arg-type]
        _check(old, residual, enc, tau, index_coding, bitmap_ratio)


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.int32 if tensor.dtype == torch.float32 else torch.int64)


@NO_DEADLINE
@given(
    residual_and_tau(),
    st.sampled_from(["compact", "int32"]),
    st.sampled_from([16, 1, 1000]),
    st.sampled_from([1.0, 0.5, -1 / 3]),
)
def test_numpy_chunked_and_torch_paths_agree_bitwise(
    case: tuple[np.ndarray, float], index_coding: str, bitmap_ratio: int, scale: float
) -> None:
    old, tau = case
    results = []
    for path in PATHS:
        residual = torch.from_numpy(old.copy())
        out = torch.from_numpy(old.copy())
        out[::3] = -0.0
        with _path(path):
            enc = encode_threshold(residual, tau, index_coding=index_coding, bitmap_ratio=bitmap_ratio)  # type: ignore[arg-type]
            decode_accumulate([enc.message, enc.message], out, scale=scale)
        results.append((enc.message, _bits(residual), _bits(out)))
    for reference, *others in zip(*results, strict=True):
        for other in others:
            assert torch.equal(reference, other)


@NO_DEADLINE
@given(
    residual_and_tau(),
    st.sampled_from(["compact", "int32"]),
    st.sampled_from([16, 1, 1000]),
    st.sampled_from([1.0, 0.5, -1 / 3]),
    st.sampled_from([torch.float32, torch.float64]),
)
def test_own_message_applies_bitwise_as_its_bytes(
    case: tuple[np.ndarray, float], index_coding: str, bitmap_ratio: int, scale: float, dtype: torch.dtype
) -> None:
    """A worker applies its own message from what the encoder kept (Encoded.local), the others from bytes."""
    old, tau = case
    for path in ("native", "numpy", "numpy_small_chunks"):
        with _path(path):
            enc = encode_threshold(
                torch.from_numpy(old.copy()), tau, index_coding=index_coding, bitmap_ratio=bitmap_ratio
            )  # type: ignore[arg-type]
            assert enc.local is not None or enc.count == 0
            start = torch.from_numpy(old.copy()).to(dtype)
            start[::3] = -0.0
            from_local, from_bytes = start.clone(), start.clone()
            decode_accumulate([enc, enc.message], from_local, scale=scale)
            decode_accumulate([enc.message, enc.message], from_bytes, scale=scale)
        assert torch.equal(_bits(from_local), _bits(from_bytes))


@ALL_PATHS
@pytest.mark.parametrize("index_coding", ["compact", "int32"])
@pytest.mark.parametrize("bitmap_ratio", [16, 7])
@pytest.mark.parametrize("n", [1, 2, 3, 15, 16, 17, 31, 32, 33, 48, 1000, 1001, 4999])
def test_sparse_bitmap_switch_point(n: int, bitmap_ratio: int, index_coding: str, path: str) -> None:
    threshold = bitmap_min_count(n, bitmap_ratio)
    assert threshold == math.ceil(n / bitmap_ratio)
    rng = np.random.default_rng(n)
    for k in (threshold - 1, threshold):
        if not 0 <= k <= n:
            continue
        old = np.full(n, 0.5, dtype=np.float32)
        old[rng.choice(n, size=k, replace=False)] = rng.choice(np.float32([-2.0, 2.0]), size=k)
        residual = torch.from_numpy(old.copy())
        with _path(path):
            enc = encode_threshold(residual, 1.0, index_coding=index_coding, bitmap_ratio=bitmap_ratio)  # type: ignore[arg-type]
        if k < 2:
            assert enc.count == 0 and enc.kind == SPARSE_KIND[index_coding]
        elif k == threshold:
            assert enc.kind == MessageKind.BITMAP
        else:
            assert enc.kind == SPARSE_KIND[index_coding]
        _check(old, residual, enc, 1.0, index_coding, bitmap_ratio)


@ALL_PATHS
def test_int32_layout(path: str) -> None:
    residual = torch.tensor([0.5, 2.0, -3.0, 0.0, 1.0])
    with _path(path):
        enc = encode_threshold(residual, 1.0, index_coding="int32", bitmap_ratio=1)
    expected = struct.pack("<iifi", 3, 5, 1.0, 0) + struct.pack("<3i", 2, -3, 5)
    assert enc.message.numpy().tobytes() == expected
    assert residual.tolist() == [0.5, 1.0, -2.0, 0.0, 0.0]


def test_compact_layout() -> None:
    residual = torch.tensor([0.5, 2.0, -3.0, 0.0, 1.0])
    enc = encode_threshold(residual, 1.0, bitmap_ratio=1)
    # gaps (skipped elements) 1, 0, 1 with signs +, -, +  ->  2, 1, 2
    expected = struct.pack("<iifi", 3, 5, 1.0, int(MessageKind.SPARSE_COMPACT)) + bytes([2, 1, 2])
    assert enc.message.numpy().tobytes() == expected


@ALL_PATHS
def test_bitmap_layout(path: str) -> None:
    old = np.zeros(20, dtype=np.float32)
    old[[0, 16]] = 1.5
    old[[3, 15, 19]] = -1.0
    residual = torch.from_numpy(old.copy())
    with _path(path):
        enc = encode_threshold(residual, 1.0)
    assert enc.kind == MessageKind.BITMAP and enc.count == 5
    words = np.array([0x8009 | 0x8008 << 16, 0x0009 | 0x0008 << 16], dtype="<u4")
    expected = struct.pack("<iifi", 5, 20, 1.0, int(MessageKind.BITMAP)) + words.tobytes()
    assert enc.message.numpy().tobytes() == expected
    _check(old, residual, enc, 1.0, "compact", 16)


@pytest.mark.parametrize("index_coding", ["compact", "int32"])
def test_fewer_than_two_sends_nothing_and_keeps_residual(index_coding: str) -> None:
    for values in ([0.0] * 40, [0.0] * 39 + [-7.0], [3.0]):
        residual = torch.tensor(values)
        enc = encode_threshold(residual, 1.0, index_coding=index_coding)  # type: ignore[arg-type]
        assert enc.count == 0 and enc.nbytes == HEADER_BYTES and enc.sparsity == 0.0
        assert enc.kind == SPARSE_KIND[index_coding]
        assert residual.tolist() == values
        assert torch.equal(decode(enc.message, len(values)), torch.zeros(len(values)))


def test_nan_is_never_sent_and_inf_stays() -> None:
    residual = torch.tensor([math.nan, math.inf, -math.inf, 2.0, 0.1])
    enc = encode_threshold(residual, 1.0, bitmap_ratio=1)
    assert enc.count == 3
    assert decode(enc.message, 5).tolist() == [0.0, 1.0, -1.0, 1.0, 0.0]
    after = residual.tolist()
    assert math.isnan(after[0]) and after[1:] == [math.inf, -math.inf, 1.0, pytest.approx(0.1)]


def test_tau_is_rounded_to_float32_once() -> None:
    tau = 0.1  # not a float32
    residual = torch.tensor([0.1, -0.1, 0.09999999])
    enc = encode_threshold(residual, tau, bitmap_ratio=1)
    assert enc.tau == float(np.float32(0.1)) == read_header(enc.message).tau
    assert enc.count == 2
    assert residual.tolist()[:2] == [0.0, 0.0]


def test_compact_size_at_sparsity_1e3() -> None:
    n = 1_000_000
    rng = np.random.default_rng(1)
    old = (rng.standard_normal(n) * 1e-3).astype(np.float32)
    old[rng.choice(n, size=n // 1000, replace=False)] = 1.0
    compact = encode_threshold(torch.from_numpy(old.copy()), 0.5)
    int32 = encode_threshold(torch.from_numpy(old.copy()), 0.5, index_coding="int32")
    assert compact.count == int32.count == n // 1000
    per_index = (compact.nbytes - HEADER_BYTES) / compact.count
    assert 1.0 <= per_index <= 2.0
    assert int32.nbytes == HEADER_BYTES + 4 * int32.count
    assert torch.equal(decode(compact.message, n), decode(int32.message, n))


def _messages(n: int, seed: int) -> list[torch.Tensor]:
    rng = np.random.default_rng(seed)
    out = []
    for step in range(12):
        residual = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
        tau = [0.05, 2.0, 3.0][step % 3]  # bitmap, sparse, very sparse
        out.append(encode_threshold(residual, tau, index_coding="int32" if step % 2 else "compact").message)
    return out


@ALL_PATHS
def test_decode_accumulate_is_the_ordered_sum(path: str) -> None:
    n = 777
    messages = _messages(n, 0)
    kinds = {read_header(m).kind for m in messages}
    assert kinds == set(MessageKind)
    start = torch.linspace(-1, 1, n)
    out = start.clone()
    with _path(path):
        decode_accumulate(messages, out)
    expected = start.clone()
    for message in messages:
        expected += decode(message, n)
    assert torch.equal(out, expected)
    exact = start.double() + sum(decode(m, n, dtype=torch.float64) for m in messages)
    torch.testing.assert_close(out.double(), exact, rtol=0, atol=1e-5)


@ALL_PATHS
def test_decode_accumulate_scale(path: str) -> None:
    n = 100
    messages = _messages(n, 1)
    out = torch.zeros(n)
    with _path(path):
        decode_accumulate(messages, out, scale=0.5)
    reference = torch.zeros(n)
    decode_accumulate(messages, reference)
    assert torch.equal(out, reference * 0.5)

    message = messages[1]
    tau = read_header(message).tau
    third = torch.zeros(n)
    decode_accumulate([message], third, scale=-1 / 3)
    nonzero = third[third != 0]
    assert set(nonzero.abs().tolist()) == {float(np.float32(tau / 3))}
    assert torch.equal(torch.sign(third), -torch.sign(decode(message, n)))


def test_decode_accumulate_float64_and_input_types() -> None:
    n = 300
    messages = _messages(n, 2)
    reference = torch.zeros(n, dtype=torch.float64)
    decode_accumulate(messages, reference)
    for convert in (lambda m: m.numpy(), lambda m: m.numpy().tobytes(), lambda m: bytearray(m.numpy())):
        out = torch.zeros(n, dtype=torch.float64)
        decode_accumulate((convert(m) for m in messages), out)
        assert torch.equal(out, reference)
    untouched = torch.ones(n)
    decode_accumulate([], untouched)
    assert torch.equal(untouched, torch.ones(n))


def _valid(kind: MessageKind, n: int = 40) -> torch.Tensor:
    residual = torch.zeros(n)
    if kind == MessageKind.BITMAP:
        residual[::3] = 2.0
        residual[1::6] = -2.0
        enc = encode_threshold(residual, 1.0)
    else:
        residual[[3, 7, 30]] = torch.tensor([2.0, -2.0, 2.0])
        coding = "int32" if kind == MessageKind.SPARSE_INT32 else "compact"
        enc = encode_threshold(residual, 1.0, index_coding=coding, bitmap_ratio=1)  # type: ignore[arg-type]
    assert enc.kind == kind
    return enc.message


def _patch(message: torch.Tensor, **fields: float) -> torch.Tensor:
    count, n, tau, kind = struct.unpack("<iifi", message[:HEADER_BYTES].numpy().tobytes())
    values = {"count": count, "n": n, "tau": tau, "kind": kind, **fields}
    header = struct.pack("<iifi", int(values["count"]), int(values["n"]), values["tau"], int(values["kind"]))
    return torch.cat([torch.frombuffer(bytearray(header), dtype=torch.uint8), message[HEADER_BYTES:]])


def _payload(message: torch.Tensor, payload: bytes) -> torch.Tensor:
    return torch.cat([message[:HEADER_BYTES], torch.frombuffer(bytearray(payload), dtype=torch.uint8)])


def _reject(message: torch.Tensor, match: str, n: int = 40) -> None:
    with pytest.raises(ValueError, match=match):
        decode_accumulate([message], torch.zeros(n))


@pytest.mark.parametrize("kind", list(MessageKind))
def test_rejects_bad_headers(kind: MessageKind) -> None:
    message = _valid(kind)
    _reject(message[:10], "shorter than")
    _reject(message, "N=40", n=41)
    _reject(_patch(message, kind=7), "unknown message kind 7")
    _reject(_patch(message, count=41), "outside")
    _reject(_patch(message, count=-1), "outside")
    _reject(_patch(message, n=-5), "negative")
    for tau in (math.nan, math.inf, 0.0, -1.0):
        _reject(_patch(message, tau=tau), "tau")


def test_rejects_bad_sparse_int32_payloads() -> None:
    message = _valid(MessageKind.SPARSE_INT32)
    _reject(message[:-4], "payload has 8 bytes")
    _reject(torch.cat([message, message[-4:]]), "payload has 16 bytes")
    _reject(_payload(message, struct.pack("<3i", 4, -8, 41)), "out of range")
    _reject(_payload(message, struct.pack("<3i", 0, -8, 31)), "out of range")
    _reject(_payload(message, struct.pack("<3i", -(2**31), 4, 31)), "out of range")
    _reject(_payload(message, struct.pack("<3i", 8, -4, 31)), "ascending")
    _reject(_payload(message, struct.pack("<3i", 4, -4, 31)), "ascending")


def test_rejects_bad_sparse_compact_payloads() -> None:
    message = _valid(MessageKind.SPARSE_COMPACT)
    _reject(message[:-1], "complete varints")
    _reject(torch.cat([message, message[-1:]]), "complete varints")
    _reject(torch.cat([message, torch.tensor([0x80], dtype=torch.uint8)]), "trailing")
    _reject(_patch(message, n=30, count=3), "out of range", n=30)


def test_rejects_bad_bitmap_payloads() -> None:
    message = _valid(MessageKind.BITMAP)  # N=40: 3 words, 8 bits of padding in the last one
    _reject(message[:-4], "BITMAP payload")
    _reject(_patch(message, count=read_header(message).count - 1), "header says")
    words = message[HEADER_BYTES:].numpy().view("<u4").copy()
    assert not words[0] & 1 << 2
    sign_only = words.copy()
    sign_only[0] |= 1 << (2 + 16)
    _reject(_payload(message, sign_only.tobytes()), "sign bit")
    past_n = words.copy()
    past_n[2] |= 1 << 12  # element 44 >= N
    _reject(_patch(_payload(message, past_n.tobytes()), count=read_header(message).count + 1), "past N")


def test_error_names_the_message_and_keeps_earlier_ones() -> None:
    good = _valid(MessageKind.SPARSE_INT32)
    out = torch.zeros(40)
    with pytest.raises(ValueError, match=r"^message 1: "):
        decode_accumulate([good, good[:10]], out)
    assert torch.equal(out, decode(good, 40))


def test_rejects_bad_arguments() -> None:
    message = _valid(MessageKind.SPARSE_COMPACT)
    for bad in (message.float(), message.unsqueeze(0), [1, 2, 3], np.zeros(20, dtype=np.int8)):
        with pytest.raises(ValueError, match="message must be"):
            decode_accumulate([bad], torch.zeros(40))  # type: ignore[list-item]
    for out in (torch.zeros(40, dtype=torch.float16), torch.zeros(4, 10), torch.zeros(40, dtype=torch.int32)):
        with pytest.raises(ValueError, match="out must be"):
            decode_accumulate([message], out)
    for scale in (math.nan, math.inf):
        with pytest.raises(ValueError, match="scale"):
            decode_accumulate([message], torch.zeros(40), scale=scale)
    huge = encode_threshold(torch.tensor([1e30, 1e30, 0.0]), 1e30, bitmap_ratio=1).message
    with pytest.raises(ValueError, match="overflows"):
        decode_accumulate([huge], torch.zeros(3), scale=1e10)


@pytest.mark.parametrize(
    ("residual", "tau", "kwargs", "match"),
    [
        (torch.zeros(4, dtype=torch.float64), 1.0, {}, "float32"),
        (torch.zeros(2, 2), 1.0, {}, "1-D"),
        (torch.zeros(4), 0.0, {}, "tau"),
        (torch.zeros(4), -1.0, {}, "tau"),
        (torch.zeros(4), math.nan, {}, "tau"),
        (torch.zeros(4), math.inf, {}, "tau"),
        (torch.zeros(4), 1e39, {}, "overflows float32"),
        (torch.zeros(4), 1e-50, {}, "underflows"),
        (torch.zeros(4), True, {}, "real number"),
        (torch.zeros(4), 1.0, {"index_coding": "varint"}, "index_coding"),
        (torch.zeros(4), 1.0, {"bitmap_ratio": 0}, "bitmap_ratio"),
        (torch.zeros(4), 1.0, {"bitmap_ratio": 2.5}, "bitmap_ratio"),
    ],
)
def test_encode_rejects(residual: torch.Tensor, tau: float, kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        encode_threshold(residual, tau, **kwargs)  # type: ignore[arg-type]


@CUDA
@pytest.mark.parametrize("tau", [0.05, 2.0, 3.5])  # bitmap, sparse, very sparse
@pytest.mark.parametrize("index_coding", ["compact", "int32"])
def test_cuda_matches_cpu_bitwise(tau: float, index_coding: str) -> None:
    n = 100_003
    rng = np.random.default_rng(5)
    old = rng.standard_normal(n).astype(np.float32)
    old[::11] = -0.0
    cpu = torch.from_numpy(old.copy())
    gpu = torch.from_numpy(old.copy()).cuda()
    enc_cpu = encode_threshold(cpu, tau, index_coding=index_coding)  # type: ignore[arg-type]
    enc_gpu = encode_threshold(gpu, tau, index_coding=index_coding)  # type: ignore[arg-type]
    assert enc_gpu.message.device.type == "cpu"
    assert torch.equal(enc_cpu.message, enc_gpu.message)
    assert torch.equal(_bits(cpu), _bits(gpu.cpu()))
    for scale in (1.0, 0.25, -1 / 3):
        start = torch.from_numpy(old.copy())
        out_cpu = start.clone()
        decode_accumulate([enc_cpu.message] * 3, out_cpu, scale=scale)
        out_gpu = start.cuda()
        messages = [enc_gpu.message, enc_gpu.message.cuda(), enc_gpu.message.numpy().tobytes()]
        decode_accumulate(messages, out_gpu, scale=scale)
        assert torch.equal(_bits(out_cpu), _bits(out_gpu.cpu()))


@pytest.mark.parametrize("n", [4096, 4111, 70_001, 100_003])
@pytest.mark.parametrize("layout", ["spread", "clustered_front", "clustered_back"])
def test_large_buffers_near_the_switch_agree_bitwise_with_numpy(n: int, layout: str) -> None:
    """The C codec samples every 16th block before deciding a bitmap, then counts exactly, and packs and adds
    bitmaps 16 elements at a time: around the switch (a bitmap's count and one less), with the hits spread out or
    bunched where the sample over- or under-reads them, NaN and -0.0 among them, and a tail that is not a whole
    word, its messages, residual and decoded sums are numpy's bit for bit."""
    rng = np.random.default_rng(n)
    cap = bitmap_min_count(n, 16)
    for k in (cap - 1, cap, 3 * cap):
        old = rng.uniform(-0.9, 0.9, n).astype(np.float32)
        if layout == "spread":
            where = rng.choice(n, size=k, replace=False)
        elif layout == "clustered_front":
            where = np.arange(k)
        else:
            where = np.arange(n - k, n)
        old[rng.choice(n, size=7, replace=False)] = np.nan
        old[rng.choice(n, size=50, replace=False)] = -0.0
        old[where] = rng.choice(np.float32([-3.0, -1.0, 1.0, 2.5]), size=k)  # exactly k reach tau = 1
        results = []
        for path in ("native", "numpy"):
            residual = torch.from_numpy(old.copy())
            if results:
                out = results[0][3].clone()
            else:
                out = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
                out[::5] = -0.0  # -0.0 - (+0.0) stays -0.0: where nothing was sent, nothing may change
            start = out.clone()
            with _path(path):
                enc = encode_threshold(residual, 1.0)
                peer = encode_threshold(torch.from_numpy(old[::-1].copy()), 1.0).message
                for scale, summed in ((1.0, False), (-0.5, False), (-0.5, True), (1 / 3, True)):
                    decode_accumulate([enc, peer], out, scale=scale, sum_bitmaps=summed)
                    decode_accumulate([peer, enc], out, scale=scale, sum_bitmaps=summed)  # the other rank's order
            results.append((enc.message, _bits(residual), _bits(out), start))
        (m1, r1, o1, _), (m2, r2, o2, _) = results
        assert torch.equal(m1, m2) and torch.equal(r1, r2) and torch.equal(o1, o2), (layout, k)
        assert (read_header(m1).kind == MessageKind.BITMAP) == (k >= cap), (layout, k)


@NO_DEADLINE
@given(residual_and_tau(), st.sampled_from([16, 1, 1000]), st.sampled_from([1.0, -0.5, -1 / 3]))
def test_summed_bitmaps_are_a_zeroed_buffer_subtracted_bitwise_on_every_path(
    case: tuple[np.ndarray, float], bitmap_ratio: int, scale: float
) -> None:
    """``sum_bitmaps``: the bitmaps' terms summed per element, then added once (the trainer's one rounding per
    element): on every path bit for bit what a zeroed buffer decoded into with the opposite scale and then
    subtracted gives, own message (from the encoder's steps) and a peer's bytes alike; sparse messages are added
    directly, the same on every path."""
    old, tau = case
    results = []
    for path in PATHS:
        with _path(path):
            enc = encode_threshold(torch.from_numpy(old.copy()), tau, bitmap_ratio=bitmap_ratio)
            peer = encode_threshold(torch.from_numpy(old[::-1].copy()), tau, bitmap_ratio=bitmap_ratio).message
            out = torch.from_numpy(old.copy())
            out[::3] = -0.0
            buffered = out.clone()
            decode_accumulate([enc, peer], out, scale=scale, sum_bitmaps=True)
            zeroed = torch.zeros_like(buffered)
            decode_accumulate([enc.message, peer], zeroed, scale=-scale)
            buffered.sub_(zeroed)
        if enc.kind == MessageKind.BITMAP and read_header(peer).kind == MessageKind.BITMAP:  # sparse ones go directly
            assert torch.equal(_bits(out), _bits(buffered)), path
        results.append(_bits(out))
    for other in results[1:]:
        assert torch.equal(results[0], other)
