"""The paired bootstrap interval of a difference between two arms over the same cases."""

from __future__ import annotations

from ctxpress.evaluation.paired import paired_interval


def _rows(values: list[float]) -> list[dict[str, object]]:
    return [{"id": f"c{i}", "exact_match": v} for i, v in enumerate(values)]


def test_a_difference_on_every_case_has_an_interval_that_excludes_zero() -> None:
    interval = paired_interval(_rows([0.0] * 40), _rows([1.0] * 30 + [0.0] * 10), "exact_match")
    assert interval is not None and interval.cases == 40
    assert interval.points == 75.0 and 0 < interval.low <= 75.0 <= interval.high <= 100


def test_no_difference_gives_an_interval_around_zero_and_the_same_each_run() -> None:
    first, second = _rows([1.0, 0.0] * 20), _rows([0.0, 1.0] * 20)
    interval = paired_interval(first, second, "exact_match")
    assert interval is not None and interval.points == 0.0 and interval.low < 0 < interval.high
    assert paired_interval(first, second, "exact_match") == interval


def test_only_cases_both_arms_answered_are_paired() -> None:
    second = _rows([1.0, 1.0, 1.0])
    second[1]["error"] = "inference_timeout"
    interval = paired_interval(_rows([0.0, 0.0]), second, "exact_match")
    assert interval is not None and interval.cases == 1
    assert paired_interval(_rows([0.0]), [], "exact_match") is None
