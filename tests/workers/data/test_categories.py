"""The one-hot encoding of categorical features (workers/data/categories.py) without Spark: the column names, the
text a value is compared as, and the online encoding that must give what Spark's expansion gives."""

from __future__ import annotations

import numpy as np
import pytest

from workers.data.categories import Categories, level_of


def test_names_replace_the_characters_spark_and_xgboost_read_and_stay_distinct() -> None:
    cats = Categories(inputs=("x", "zone", "y"), levels={"zone": ("a.b", "a_b", "[c]", "<d")})
    assert cats.names == ("x", "zone=a_b", "zone=a_b_", "zone=_c_", "zone=_d", "y")
    assert Categories.from_dict(cats.to_dict()).to_dict() == cats.to_dict()
    # Spark resolves names in any case: "sex=Male" and "sex=male" were one column to it (AMBIGUOUS_REFERENCE)
    cased = Categories(inputs=("Sex", "age"), levels={"Sex": ("Male", "male", "x")})
    assert cased.names == ("Sex=Male", "Sex=male_", "Sex=x", "age")
    beside = Categories(inputs=("Sex", "sex=MALE"), levels={"Sex": ("Male", "male")})  # an input of that name
    assert beside.names[-1] == "sex=MALE" and len({n.lower() for n in beside.names}) == 3, beside.names


@pytest.mark.parametrize(
    ("value", "kind", "text"),
    [(True, "string", "true"), (3, "string", "3"), (np.int64(3), "string", "3"), (1.5, "string", "1.5"),
     ("north", "string", "north"), (None, "string", None), (float("nan"), "int", None),
     # through the column's trained type, as Spark casts a column another reader typed otherwise
     ("02134", "int", "2134"), (2134.0, "bigint", "2134"), (" 7", "int", "7"), ("+4", "int", "4"),
     ("True", "boolean", "true"), (1, "boolean", "true"), (False, "boolean", "false"), (0.0, "boolean", "false"),
     # the text Spark casts to a boolean
     ("yes", "boolean", "true"), (" N ", "boolean", "false"), ("t", "boolean", "true"), ("0", "boolean", "false")],
)  # fmt: skip
def test_a_value_is_the_text_of_its_column_type(value: object, kind: str, text: str | None) -> None:
    assert level_of(value, kind) == text


@pytest.mark.parametrize(
    ("value", "kind", "words"),
    [("two", "int", "not a whole number"), (2.5, "int", "not a whole number"), (True, "int", "is a boolean"),
     ("3.0", "int", "not a whole number"), ("1e3", "int", "not a whole number"), ("٣", "int", "not a whole number"),
     ("maybe", "boolean", "not a boolean"), (2, "boolean", "not a boolean"), ("2", "boolean", "not a boolean"),
     (0.5, "boolean", "not a boolean")],
)  # fmt: skip
def test_a_value_its_column_type_cannot_hold_is_refused(value: object, kind: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        level_of(value, kind)


def test_rows_encode_one_hot_unseen_as_zeros_and_report_a_null_category() -> None:
    cats = Categories(inputs=("d", "city", "tier", "flag"), levels={"city": ("east", "north"), "tier": ("1", "2")},
                      types={"tier": "int"})  # fmt: skip
    x, problems = cats.encode([{"d": 2.5, "city": "north", "tier": "2", "flag": True},
                               {"d": 1, "city": "west", "tier": 1.0, "flag": False},
                               {"d": "far", "city": None, "tier": 3, "flag": 1},
                               {"d": 0, "city": "east", "tier": "x", "flag": 0}])  # fmt: skip
    assert x[:2].tolist() == [[2.5, 0, 1, 0, 1, 1], [1.0, 0, 0, 1, 0, 0]]  # a boolean feature is 1.0 / 0.0
    assert np.isnan(x[2, 0]) and x[2, 1:].tolist() == [0, 0, 0, 0, 1]
    whole = 'row 3: tier: "x" is not a whole number; the column\'s categories are whole numbers'
    assert problems == ["row 2: city is null; a categorical feature needs a category", whole]
    assert Categories.from_dict(cats.to_dict()).to_dict() == cats.to_dict() and cats.to_dict()["types"] == {
        "city": "string",
        "tier": "int",
    }
