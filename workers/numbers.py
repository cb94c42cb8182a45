"""Numbers from JSON requests, checked the same way everywhere (executor-side: no imports beyond the standard
library)."""

from __future__ import annotations

import json
import math
from typing import Any

INT32_MAX = 2**31 - 1
"""The largest Java ``int`` (Spark ML's integer parameters) and C ``int`` (xgboost's)."""
INT64_MAX = 2**63 - 1
"""The largest Java ``long`` (Spark ML's seed) and xgboost's seed."""


def is_finite_number(value: Any) -> bool:
    """A JSON number (not a boolean) that a float holds: finite, and not a whole number too large for a float
    (``math.isfinite(10**400)`` raises OverflowError, which a request turned into a 500)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def as_json(value: Any) -> str:
    """A request's value as the user wrote it, in JSON (``true``, ``null``, ``"8"``), not Python's ``repr``; a numpy
    scalar as its number, and anything JSON cannot write as its ``repr``."""
    try:
        if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:  # a scalar, not an array
            value = value.item()
        return json.dumps(value, ensure_ascii=False)
    except ValueError:  # str() refuses whole numbers beyond 4,300 digits
        if isinstance(value, int) and not isinstance(value, bool):
            return f"a whole number of {value.bit_length()} bits"
    except TypeError:
        pass
    try:
        return repr(value)
    except ValueError:  # a huge whole number inside a list
        return f"a {type(value).__name__} too large to show"


def shown(value: Any, limit: int = 40) -> str:
    """:func:`as_json` cut to ``limit`` characters and its length (a 400-digit number in a message says nothing
    more than its first digits and how long it is)."""
    text = as_json(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}... ({len(text):,} characters)"


def n_rows(count: int) -> str:
    """``1 row``, ``3 rows``: a message's count of rows (a single bad row is the commonest case)."""
    return f"{count} row" if count == 1 else f"{count} rows"


def have(count: int) -> str:
    """The verb after :func:`n_rows`: ``1 row has``, ``3 rows have``."""
    return "has" if count == 1 else "have"


def were(count: int) -> str:
    """``1 row was``, ``3 rows were``."""
    return "was" if count == 1 else "were"
