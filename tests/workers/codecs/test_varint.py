import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.codecs.varint import (
    MAX_VARINT_BYTES,
    decode_signed_indices,
    encode_signed_indices,
    encoded_size,
)

# First calls into torch/numpy can exceed hypothesis's 200 ms deadline on a loaded CI machine.
NO_DEADLINE = settings(deadline=None)

INT32_MAX = 2**31 - 1


def _arrays(indices: list[int], negative: list[bool]) -> tuple[np.ndarray, np.ndarray]:
    return np.array(indices, dtype=np.int64), np.array(negative, dtype=bool)


@st.composite
def signed_index_lists(draw: st.DrawFn, max_index: int = INT32_MAX - 1) -> tuple[np.ndarray, np.ndarray]:
    indices = sorted(draw(st.sets(st.integers(0, max_index), max_size=200)))
    negative = draw(st.lists(st.booleans(), min_size=len(indices), max_size=len(indices)))
    return _arrays(indices, negative)


def _round_trip(indices: np.ndarray, negative: np.ndarray) -> np.ndarray:
    buf = encode_signed_indices(indices, negative)
    assert buf.dtype == np.uint8 and buf.ndim == 1
    decoded_indices, decoded_negative = decode_signed_indices(buf, indices.size)
    assert decoded_indices.dtype == np.int64 and decoded_negative.dtype == np.bool_
    np.testing.assert_array_equal(decoded_indices, indices)
    np.testing.assert_array_equal(decoded_negative, negative)
    assert encoded_size(indices, negative) == buf.size
    return buf


@NO_DEADLINE
@given(signed_index_lists())
def test_round_trip_int32_range(data: tuple[np.ndarray, np.ndarray]) -> None:
    indices, negative = data
    buf = _round_trip(indices, negative)
    # Every gap below 2**31 fits 5 bytes (4 * 7 = 28 bits are not enough for 31 bits + sign).
    assert buf.size <= 5 * indices.size


@NO_DEADLINE
@given(signed_index_lists(max_index=2**63 - 1))
def test_round_trip_full_int64_range(data: tuple[np.ndarray, np.ndarray]) -> None:
    buf = _round_trip(*data)
    assert buf.size <= MAX_VARINT_BYTES * data[0].size


@NO_DEADLINE
@given(st.integers(1, 5000), st.integers(0, 2**32 - 1))
def test_dense_runs_cost_one_byte_each(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    indices = np.arange(n, dtype=np.int64)
    negative = rng.random(n) < 0.5
    buf = _round_trip(indices, negative)
    assert buf.size == n


def test_empty() -> None:
    buf = encode_signed_indices(np.empty(0, dtype=np.int64), np.empty(0, dtype=bool))
    assert buf.size == 0
    indices, negative = decode_signed_indices(buf, 0)
    assert indices.size == 0 and negative.size == 0


@pytest.mark.parametrize(
    ("indices", "negative", "expected"),
    [
        ([0], [False], [0x00]),
        ([0], [True], [0x01]),
        ([0, 1], [False, True], [0x00, 0x01]),
        ([3, 5], [True, False], [0x07, 0x02]),  # first gap = 3 skipped, then 1 skipped
        ([63], [True], [0x7F]),
        ([64], [False], [0x80, 0x01]),
        ([8191], [True], [0xFF, 0x7F]),
        ([8192], [False], [0x80, 0x80, 0x01]),
    ],
)
def test_known_codes(indices: list[int], negative: list[bool], expected: list[int]) -> None:
    buf = _round_trip(*_arrays(indices, negative))
    assert buf.tolist() == expected


@pytest.mark.parametrize(("bits", "length"), [(7, 1), (14, 2), (21, 3), (28, 4), (35, 5), (63, 9), (64, 10)])
def test_byte_length_boundaries(bits: int, length: int) -> None:
    # value = gap << 1 | sign; the largest value of `bits` bits has gap 2**(bits-1) - 1 and sign 1.
    largest = _arrays([2 ** (bits - 1) - 1], [True])
    assert encode_signed_indices(*largest).size == length
    if bits < 64:
        smallest_longer = _arrays([2 ** (bits - 1)], [False])
        assert encode_signed_indices(*smallest_longer).size == length + 1


def test_largest_int32_gap_needs_five_bytes() -> None:
    buf = _round_trip(*_arrays([0, INT32_MAX - 1], [False, True]))
    assert buf.size == 1 + 5


def test_sparsity_1e3_on_a_million_averages_under_two_bytes() -> None:
    rng = np.random.default_rng(0)
    n = 1_000_000
    indices = np.sort(rng.choice(n, size=n // 1000, replace=False)).astype(np.int64)
    negative = rng.random(indices.size) < 0.5
    buf = _round_trip(indices, negative)
    assert 1.5 < buf.size / indices.size <= 2.0


@pytest.mark.parametrize(
    ("indices", "negative", "match"),
    [
        ([3, 2], [False, False], "strictly ascending"),
        ([2, 2], [False, False], "strictly ascending"),
        ([-1, 2], [False, False], ">= 0"),
        ([1, 2], [False], "same length"),
    ],
)
def test_encode_rejects(indices: list[int], negative: list[bool], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        encode_signed_indices(np.array(indices, dtype=np.int64), np.array(negative, dtype=bool))


def test_encode_rejects_bad_dtypes() -> None:
    with pytest.raises(ValueError, match="integers"):
        encode_signed_indices(np.array([1.0]), np.array([False]))
    with pytest.raises(ValueError, match="bool"):
        encode_signed_indices(np.array([1]), np.array([0]))


@pytest.mark.parametrize(
    ("buf", "count", "match"),
    [
        ([0x80], 1, "complete varints"),  # truncated: continuation bit on the last byte
        ([0x02, 0x80], 1, "trailing"),
        ([0x02, 0x04], 1, "complete varints"),
        ([0x02], 2, "complete varints"),
        ([0x02], 0, "empty buffer"),
        ([0xFF] * MAX_VARINT_BYTES + [0x01], 1, "longer than"),
        ([0xFF] * (MAX_VARINT_BYTES - 1) + [0x02], 1, "overflows 64 bits"),
    ],
)
def test_decode_rejects(buf: list[int], count: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        decode_signed_indices(np.array(buf, dtype=np.uint8), count)


def test_decode_rejects_index_overflow() -> None:
    big = encode_signed_indices(*_arrays([2**63 - 1], [False]))
    with pytest.raises(ValueError, match="overflow"):
        decode_signed_indices(np.concatenate([big, big]), 2)


def test_decode_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="uint8"):
        decode_signed_indices(np.array([1, 2], dtype=np.int32), 2)
    with pytest.raises(ValueError, match="count"):
        decode_signed_indices(np.array([], dtype=np.uint8), -1)
