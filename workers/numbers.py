"""Numbers from JSON requests, checked the same way everywhere (executor-side: no imports beyond the standard
library)."""

from __future__ import annotations

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


def shown(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters (a 400-digit number in a message says nothing more)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
