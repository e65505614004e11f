"""Each user's share, as pure logic: the per-user in-flight cap and token bucket, the engine's admission per
user, the telemetry backlog per user, and how the editor doors read ``rate_limited``. No services."""

from __future__ import annotations

import pytest

from ctxpress.http.upstream import ERROR_STATUS, retry_after
from ctxpress_core.errors import ErrorCode, RateLimited, RequestError
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import ErrorBody, ErrorResponse
from workers.completion.engine_load import EngineLoad
from workers.fair_share import FLOODING_WINDOW_S, MAX_IDLE_ENTRIES, Flooding, UserLimits
from workers.telemetry import TelemetryWriter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_user_at_their_in_flight_cap_is_refused_and_others_are_not() -> None:
    limits = UserLimits(max_inflight=2, rate_per_s=0, burst=1)
    with limits.hold("alice"), limits.hold("alice"):
        with pytest.raises(RateLimited) as refused:
            limits.take("alice", inflight_retry_ms=300)
        assert refused.value.code == ErrorCode.RATE_LIMITED and refused.value.retry_after_ms == 300
        with limits.hold("bob"):
            assert limits.inflight("bob") == 1
    assert limits.inflight("alice") == 0
    with limits.hold("alice"):  # released: admitted again
        pass


def test_the_token_bucket_allows_a_burst_then_the_rate_and_says_when_to_retry() -> None:
    clock = Clock()
    limits = UserLimits(max_inflight=0, rate_per_s=10, burst=5, clock=clock)
    for _ in range(5):
        limits.take("alice")
    with pytest.raises(RateLimited) as refused:
        limits.take("alice")
    assert refused.value.retry_after_ms == 100  # one token comes back in 1/10 s
    limits.take("bob")  # bob's bucket is his own
    clock.now += 0.1
    limits.take("alice")
    with pytest.raises(RateLimited):
        limits.take("alice")
    clock.now += 10  # refilled to the burst, not beyond
    for _ in range(5):
        limits.take("alice")
    with pytest.raises(RateLimited):
        limits.take("alice")


def test_a_refused_request_holds_nothing() -> None:
    limits = UserLimits(max_inflight=1, rate_per_s=0, burst=1)
    with limits.hold("alice"):
        with pytest.raises(RateLimited), limits.hold("alice"):
            pass
        assert limits.inflight("alice") == 1


def test_the_defaults_let_a_fast_typist_through() -> None:
    """Ten keystrokes a second for a minute, each request cancelled by the next: never refused."""
    clock = Clock()
    settings = Settings()
    limits = UserLimits(settings.user_max_inflight, settings.user_requests_per_s, settings.user_request_burst,
                        clock=clock)
    for _ in range(600):
        with limits.hold("bob"):
            clock.now += 0.1


def test_a_single_user_appliance_has_no_share_to_keep() -> None:
    """Its one developer's editors and benchmarks (many requests at once) meet only the engine's admission."""
    limits = UserLimits(1, 1.0, 1, clock=Clock())
    with limits.hold(None), limits.hold(None):
        for _ in range(100):
            limits.take(None)


def test_rate_limited_is_on_the_wire_with_its_retry_after() -> None:
    body = ErrorBody.of(RateLimited("too many", 1500))
    wire = ErrorResponse.model_validate_json(ErrorResponse(error=body).model_dump_json()).error
    assert wire.code == ErrorCode.RATE_LIMITED and wire.retry_after_ms == 1500
    assert ErrorBody.of(RequestError(ErrorCode.OVERLOADED, "busy")).retry_after_ms is None


def test_the_http_bridge_answers_rate_limited_with_429_and_retry_after() -> None:
    assert ERROR_STATUS[ErrorCode.RATE_LIMITED] == 429
    assert retry_after("rate_limited", 1500) == {"Retry-After": "2"}
    assert retry_after("rate_limited", 40) == {"Retry-After": "1"}
    assert retry_after("rate_limited", None) == {"Retry-After": "1"}
    assert retry_after("forbidden", 1500) is None


def test_another_users_long_deadline_requests_do_not_make_the_engine_look_full() -> None:
    """alice holds four long requests at the engine (which serves the earliest deadline first): bob's first
    request counts one of them ahead, not four, and is admitted within a 5 s wait."""
    load = EngineLoad(prior_s=2.0, slots=4)
    with load.track("alice"), load.track("alice"), load.track("alice"), load.track("alice"):
        assert load.expected_wait_s("bob") == 2.0
        load.admit(5.0, "bob")
        with pytest.raises(RequestError) as busy:
            load.admit(5.0, "alice")  # her own four are ahead of her fifth
        assert busy.value.code == ErrorCode.OVERLOADED


def test_a_user_holds_at_most_an_equal_share_of_the_engine_while_another_waits() -> None:
    load = EngineLoad(prior_s=0.5, slots=4)
    with load.track("alice"), load.track("alice"):
        load.admit(600.0, "alice")  # alone: all of the engine
        with load.track("bob"):
            with pytest.raises(RateLimited) as refused:
                load.admit(600.0, "alice")  # two of four while bob waits
            assert refused.value.retry_after_ms == 500
            load.admit(600.0, "bob")


def test_a_single_user_sees_the_engine_as_before() -> None:
    load = EngineLoad(prior_s=1.0, slots=4)
    with load.track(), load.track(), load.track():
        assert load.expected_wait_s() == 3.0
        load.admit(3.5)
        with pytest.raises(RequestError):
            load.admit(2.5)


def test_one_users_feedback_spam_does_not_drop_another_users_rows() -> None:
    writer = TelemetryWriter("postgresql://unused", max_backlog=100, user_backlog=30)
    for i in range(500):  # the database is slow: nothing is flushed meanwhile
        writer.record_feedback({"completion_id": f"c{i}", "action": "accepted", "chars_kept": 1,
                                "user_name": "alice"})
    writer.record_feedback({"completion_id": "b1", "action": "accepted", "chars_kept": 1, "user_name": "bob"})
    writer.record_event({"request_id": "b2", "user_name": "bob"})
    assert [r["user_name"] for r in writer._feedback].count("alice") == 30
    assert [r["completion_id"] for r in writer._feedback if r["user_name"] == "bob"] == ["b1"]
    assert [r["request_id"] for r in writer._events] == ["b2"]


def test_another_users_long_requests_do_not_make_a_short_one_look_late() -> None:
    """alice's requests take 20 s each, bob's 0.5 s: the engine interleaves their steps, so each of hers ahead
    delays his by at most his own time."""
    load = EngineLoad(prior_s=1.0, alpha=1.0, slots=4)
    load._user_mean_s.update({"alice": 20.0, "bob": 0.5})
    with load.track("alice"), load.track("alice"):
        assert load.expected_wait_s("bob") == 0.5
        load.admit(5.0, "bob")
        assert load.expected_wait_s("alice") == 40.0


def test_a_refused_user_is_flooding_for_the_window_and_others_are_not() -> None:
    clock = Clock()
    limits = UserLimits(max_inflight=0, rate_per_s=1, burst=1, clock=clock)
    limits.take("alice")
    limits.take("bob")
    with pytest.raises(RateLimited):
        limits.take("alice")
    assert "alice" in limits.flooding and "bob" not in limits.flooding and None not in limits.flooding
    clock.now += FLOODING_WINDOW_S - 1
    assert "alice" in limits.flooding
    clock.now += 2
    assert "alice" not in limits.flooding  # she stopped: weighed as anyone again


def test_the_flooding_record_is_shared_by_a_processs_limits_and_bounded() -> None:
    clock = Clock()
    flooding = Flooding(clock)
    feedback = UserLimits(max_inflight=0, rate_per_s=1, burst=1, clock=clock, flooding=flooding)
    feedback.take("carol")
    with pytest.raises(RateLimited):
        feedback.take("carol")  # feedback spam marks her for her requests too
    assert "carol" in UserLimits(max_inflight=4, rate_per_s=0, burst=1, clock=clock, flooding=flooding).flooding
    for i in range(MAX_IDLE_ENTRIES + 10):
        flooding.mark(f"user{i}")
    assert "carol" not in flooding and f"user{MAX_IDLE_ENTRIES + 9}" in flooding
