"""Normalizers: one-pass fits that merge exactly, and the same transform wherever it is applied."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from workers.data.normalize import Moments, Normalizer, fit, normalizer_from


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.float64, st.tuples(st.integers(1, 40), st.just(3)), elements=st.floats(-1e3, 1e3)),
    st.lists(st.integers(0, 40), max_size=4),
)
def test_moments_merge_equals_one_pass(x: np.ndarray, cuts: list[int]) -> None:
    edges = sorted({0, len(x), *[min(c, len(x)) for c in cuts]})
    merged = Moments.of(x[:0])
    for a, b in itertools.pairwise(edges):
        merged = merged.merge(Moments.of(x[a:b]))
    whole = Moments.of(x)
    assert merged.n == whole.n
    np.testing.assert_allclose(merged.mean, whole.mean, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(merged.m2, whole.m2, rtol=1e-7, atol=1e-6)
    np.testing.assert_array_equal(merged.low, x.min(axis=0))
    np.testing.assert_array_equal(merged.high, x.max(axis=0))


def test_kinds() -> None:
    x = np.array([[0.0, 5.0, 2.0], [2.0, 5.0, 4.0], [4.0, 5.0, 12.0]])
    m = Moments.of(x)
    standard = normalizer_from("standardize", m).apply(x)
    np.testing.assert_allclose(standard.mean(axis=0), 0, atol=1e-6)
    np.testing.assert_allclose(standard[:, [0, 2]].std(axis=0), 1, atol=1e-6)
    assert (standard[:, 1] == 0).all()  # a constant feature is shifted, not divided by 0
    minmax = normalizer_from("minmax", m).apply(x)
    assert minmax.min() == 0 and minmax.max() == 1
    image = normalizer_from("image", m).apply(x)
    np.testing.assert_allclose(image, x / 12.0, rtol=1e-6)
    n = normalizer_from("standardize", m)
    assert Normalizer.from_dict(n.to_dict()) == n
    with pytest.raises(ValueError, match="fitted on 3 features"):
        n.apply(np.zeros((2, 4)))
    with pytest.raises(ValueError, match="unknown normalizer"):
        Normalizer.from_dict({"kind": "zscore", "shift": [0], "scale": [1]})


def test_fit_on_spark_matches_numpy(spark: Any) -> None:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(3, 2, 5000), "b": rng.uniform(-1, 9, 5000)})
    frame["v"] = list(rng.normal(0, 4, (5000, 6)))
    df = spark.createDataFrame(frame).repartition(7)
    columns = fit(df, ("a", "b"), "standardize", array_column=False)
    np.testing.assert_allclose(columns.shift, frame[["a", "b"]].mean().to_numpy(), rtol=1e-9)
    np.testing.assert_allclose(columns.scale, frame[["a", "b"]].std(ddof=0).to_numpy(), rtol=1e-9)
    vectors = np.stack(frame["v"].to_numpy())
    array = fit(df, ("v",), "minmax", array_column=True)
    np.testing.assert_allclose(array.shift, vectors.min(axis=0))
    np.testing.assert_allclose(array.scale, vectors.max(axis=0) - vectors.min(axis=0))
    assert array.count == 5000
