"""The latency-first scheduler on a fake clock: window, urgent queue, adaptive batch, warm-ups last."""

from __future__ import annotations

from serving.scheduler import LatencyFirstScheduler


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, ms: float) -> None:
        self.now += ms / 1000


def test_a_lone_request_is_released_at_once_under_sparse_traffic() -> None:
    clock = Clock()
    s: LatencyFirstScheduler[str] = LatencyFirstScheduler(clock=clock)
    s.submit("a")
    assert s.next_batch() == ["a"]
    clock.advance(500)
    s.submit("b")
    assert s.batch_size() == 1 and s.next_batch() == ["b"]


def test_dense_traffic_waits_for_the_window_to_fill_a_batch() -> None:
    clock = Clock()
    s: LatencyFirstScheduler[int] = LatencyFirstScheduler(clock=clock, max_batch=4)
    for i in range(10):  # 1 ms apart: a window gathers about five
        s.submit(i)
        clock.advance(1)
    assert s.batch_size() == 4
    released = s.next_batch()  # some waited longer than the window: urgent, released first
    assert released[:1] == [0] and len(released) >= 4
    s2: LatencyFirstScheduler[int] = LatencyFirstScheduler(clock=clock, max_batch=4)
    s2._arrivals.extend(clock.now - i / 1000 for i in range(10, 0, -1))  # same dense history
    s2.submit(100)
    assert s2.next_batch() == []  # too few yet, and the window is not over
    assert 0 < (s2.wait_s() or 0) <= 0.005
    clock.advance(6)
    assert s2.next_batch() == [100]  # the window passed: released even alone


def test_urgent_requests_go_before_fresh_ones() -> None:
    clock = Clock()
    s: LatencyFirstScheduler[str] = LatencyFirstScheduler(clock=clock, max_batch=2)
    s._arrivals.extend(clock.now - i / 1000 for i in range(10, 0, -1))
    s.submit("old")
    clock.advance(7)
    s.submit("new1")
    s.submit("new2")
    first = s.next_batch()
    assert first[0] == "old" and s.stats.urgent == 1


def test_warm_ups_wait_while_any_live_request_is_queued() -> None:
    clock = Clock()
    s: LatencyFirstScheduler[str] = LatencyFirstScheduler(clock=clock)
    s.submit("warm", warm=True)
    s.submit("live")
    assert s.next_batch() == ["live"]
    assert s.next_batch() == ["warm"]
    assert s.next_batch() == [] and s.wait_s() is None
