"""The inference request models refuse what no registered model, version, alias or checkpoint can be: values that
used to reach the database and fail there (a NUL byte in PostgreSQL text, a version beyond its 32-bit column)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from app.schemas.inference import ModelSelector
from app.schemas.train import TrainingOptions


@pytest.mark.parametrize(
    "selector",
    [
        {"name": "m", "alias": "champion"},
        {"name": "m", "version": 2**31 - 1},
        {"checkpoint": "0123456789abcdef0123456789abcdef"},
    ],
)
def test_selectors(selector: dict[str, Any]) -> None:
    ModelSelector.model_validate(selector)


@pytest.mark.parametrize(
    "selector",
    [
        {"name": "m", "alias": "a\x00"},
        {"name": "m", "alias": "1st"},
        {"name": "m", "alias": ""},
        {"name": "m", "version": 2**31},
        {"name": "m", "version": 0},
        {"checkpoint": "\x00"},
        {"checkpoint": "../x"},
        {"checkpoint": "c" * 65},
    ],
)
def test_impossible_selectors(selector: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ModelSelector.model_validate(selector)


def test_resume_from_is_a_checkpoint_id() -> None:
    assert TrainingOptions(resume_from="0123456789abcdef0123456789abcdef").resume_from
    for bad in ("\x00", "a/b", ""):
        with pytest.raises(ValidationError):
            TrainingOptions(resume_from=bad)
