"""The latency-first scheduler on a fake clock: window, urgent queue, adaptive batch, warm-ups last."""

from __future__ import annotations

from serving.engine.scheduler import LatencyFirstScheduler


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


def test_without_costs_requests_go_in_arrival_order_one_at_a_time() -> None:
    clock = Clock()
    s: LatencyFirstScheduler[str] = LatencyFirstScheduler(clock=clock)
    for name in ("a", "b", "c"):
        s.submit(name)
        clock.advance(1)
    clock.advance(10)
    assert [s.next_batch(limit=1) for _ in range(3)] == [["a"], ["b"], ["c"]]


def test_a_keystroke_goes_before_a_cold_prompt_that_arrived_just_before_it() -> None:
    clock = Clock()
    s: LatencyFirstScheduler[str] = LatencyFirstScheduler(clock=clock)
    s.submit("cold prompt", cost_s=15.0)
    clock.advance(200)
    s.submit("keystroke", cost_s=1.0)
    clock.advance(10)
    assert s.next_batch(limit=1) == ["keystroke"]
    assert s.next_batch(limit=1) == ["cold prompt"]


def test_a_running_prompt_gives_way_only_to_requests_due_before_it() -> None:
    clock = Clock()
    s: LatencyFirstScheduler[str] = LatencyFirstScheduler(clock=clock)
    cold = s.submit("cold prompt", cost_s=15.0)
    assert s.next_batch(limit=1) == ["cold prompt"]  # running now
    clock.advance(2000)
    s.submit("keystroke", cost_s=1.0)  # due 3 s after the cold prompt arrived, before its 15 s
    assert s.earlier_than(cold.deadline)
    assert s.next_batch(limit=1) == ["keystroke"]
    clock.advance(12_500)
    s.submit("late keystroke", cost_s=1.0)  # due 15.5 s after: the cold prompt has waited long enough
    assert not s.earlier_than(cold.deadline)


def test_a_request_that_gave_way_keeps_its_arrival_and_deadline() -> None:
    clock = Clock()
    s: LatencyFirstScheduler[str] = LatencyFirstScheduler(clock=clock)
    cold = s.submit("cold prompt", cost_s=15.0)
    assert s.next_batch(limit=1) == ["cold prompt"]
    clock.advance(2000)
    s.submit("keystroke", cost_s=1.0)
    again = s.submit("cold prompt, again", ticket=cold)  # it gave way: queued with its first ticket
    assert again == cold and len(s._arrivals) == 2  # not a new arrival
    clock.advance(1)
    assert s.next_batch(limit=1) == ["keystroke"]  # due first, though the cold prompt is older
    assert s.next_batch(limit=1) == ["cold prompt, again"]
