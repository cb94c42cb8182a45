"""The one-hot encoding of categorical features (workers/data/categories.py) without Spark: the column names, the
text a value is compared as, and the online encoding that must give what Spark's expansion gives."""

from __future__ import annotations

import numpy as np
import pytest

from workers.data.categories import Categories, level_of


def test_names_replace_the_characters_spark_and_xgboost_read_and_stay_distinct() -> None:
    cats = Categories(inputs=("x", "zone", "y"), levels={"zone": ("a.b", "a_b", "[c]", "<d")})
    assert cats.names == ("x", "zone=a_b", "zone=a_b_", "zone=_c_", "zone=_d", "y")
    assert Categories.from_dict(cats.to_dict()) == cats


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, "true"), (False, "false"), (3, "3"), (np.int64(3), "3"), (1.5, "1.5"), ("north", "north"),
     (None, None), (float("nan"), None)],
)  # fmt: skip
def test_a_value_is_compared_as_sparks_cast_to_string_writes_it(value: object, text: str | None) -> None:
    assert level_of(value) == text


def test_rows_encode_one_hot_unseen_as_zeros_and_report_a_null_category() -> None:
    cats = Categories(inputs=("d", "city", "tier"), levels={"city": ("east", "north"), "tier": ("1", "2")})
    x, problems = cats.encode([{"d": 2.5, "city": "north", "tier": 2}, {"d": 1, "city": "west", "tier": 1},
                               {"d": "far", "city": None, "tier": 3}])  # fmt: skip
    assert x[:2].tolist() == [[2.5, 0, 1, 0, 1], [1.0, 0, 0, 1, 0]]
    assert np.isnan(x[2, 0]) and x[2, 1:].tolist() == [0, 0, 0, 0]
    assert problems == ["row 2: city is null; it is a category"]
