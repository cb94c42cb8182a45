"""How a request's values and counts read in messages: as the user wrote them in JSON, with the right plural."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from workers.numbers import as_json, have, n_rows, shown


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (True, "true"),
        (None, "null"),
        ("8", '"8"'),
        ("é", '"é"'),
        (float("nan"), "NaN"),
        (float("inf"), "Infinity"),
        (1.5, "1.5"),
        ([1, "a"], '[1, "a"]'),
        (np.float32(2.5), "2.5"),
        (np.int64(3), "3"),
        (np.bool_(False), "false"),
        pytest.param(10**5000, "a whole number of 16610 bits", id="beyond-4300-digits"),
        ({1, 2}, "{1, 2}"),  # not JSON: its repr
        (np.array([1.0, 2.0]), "array([1., 2.])"),  # an array is not a scalar
        pytest.param([10**5000], "a list too large to show", id="huge-in-a-list"),
    ],
)
def test_a_value_reads_as_the_request_wrote_it(value: Any, text: str) -> None:
    assert as_json(value) == text


def test_a_long_value_is_cut() -> None:
    assert shown("x" * 100) == '"' + "x" * 36 + "... (102 characters)"
    assert shown(10**300) == "1" + "0" * 36 + "... (301 characters)"
    assert shown("x" * 38) == '"' + "x" * 38 + '"'  # 40: not cut


def test_counts_of_rows_agree_with_their_verb() -> None:
    assert f"{n_rows(1)} {have(1)}" == "1 row has"
    assert f"{n_rows(0)} {have(0)}" == "0 rows have"
    assert f"{n_rows(3)} {have(3)}" == "3 rows have"
