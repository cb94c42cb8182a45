"""A spec's several problems in one 422, and in a job's error, which has no ``errors`` list to hold them."""

from __future__ import annotations

from app.core.errors import ValidationFailed
from app.services.tuning.submit import _located
from workers.errors import SpecError
from workers.training.xgboost.spec import parse_xgboost_params


def _refused(params: dict[str, object]) -> ValidationFailed:
    try:
        parse_xgboost_params(params, task="regression")
    except SpecError as exc:
        return ValidationFailed.of(exc)
    raise AssertionError(f"{params} was taken")


def test_a_job_error_names_every_problem_a_422_would_list() -> None:
    """A job that plans when it runs (data only Spark reads) fails INVALID_REQUEST with the 422's words: they said
    "(and 1 more)" and named only the first (review)."""
    two = _refused({"eta": -1, "max_depth": "3"})
    assert two.detail.endswith("(and 1 more)") and len(two.errors or []) == 2
    every = two.every_problem()
    assert every.startswith("params.eta: eta (learning_rate) must be") and "; params.max_depth: max_depth" in every
    assert "(and" not in every
    one = _refused({"eta": -1})
    assert one.every_problem() == one.detail


def test_a_space_value_whose_body_has_two_problems_names_both_at_the_space_path() -> None:
    located = _located(_refused({"eta": -1, "max_depth": "3"}), "space.params", "the value {...} makes an invalid "
                       "/train body")  # fmt: skip
    assert [e["loc"] for e in located.errors or []] == ["space.params"]
    assert "(and" not in located.detail and "params.eta:" in located.detail and "params.max_depth:" in located.detail
    base = _located(_refused({"eta": -1, "max_depth": "3"}), "base")
    assert [e["loc"] for e in base.errors or []] == ["base.params.eta", "base.params.max_depth"]
