"""The completion worker's estimate of the engine's queue (what ``overloaded`` is decided on)."""

from __future__ import annotations

import time
from contextlib import nullcontext

import pytest

from workers.completion.engine_load import EngineLoad


def _ended(load: EngineLoad, seconds: float, fail: bool) -> None:
    with pytest.raises(TimeoutError) if fail else nullcontext(), load.track():
        time.sleep(seconds)
        if fail:
            raise TimeoutError


def test_requests_that_time_out_teach_the_estimate_that_the_engine_is_slow() -> None:
    load = EngineLoad(prior_s=0.01, alpha=0.5)
    for _ in range(4):
        _ended(load, 0.05, fail=True)  # every request timed out: none was ever answered
    assert load.mean_s > 0.04
    with load.track(), load.track(), load.track():
        assert load.expected_wait_s() > 0.12


def test_a_request_cancelled_early_does_not_make_the_engine_look_faster() -> None:
    load = EngineLoad(prior_s=0.2, alpha=0.5)
    _ended(load, 0.0, fail=True)
    assert load.mean_s == 0.2
    _ended(load, 0.0, fail=False)  # an answer, however quick, is what a request takes
    assert load.mean_s < 0.2
