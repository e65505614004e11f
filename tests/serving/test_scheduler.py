"""The latency-first scheduler on a fake clock: window, urgent queue, adaptive batch, warm-ups last, engine time
shared between users."""

from __future__ import annotations

from serving.engine.scheduler import LatencyFirstScheduler, Ticket


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
    assert s.should_give_way(cold, ran_s=2.0)
    assert s.next_batch(limit=1) == ["keystroke"]
    clock.advance(12_500)
    s.submit("late keystroke", cost_s=1.0)  # due 15.5 s after: the cold prompt has waited long enough
    assert not s.should_give_way(cold, ran_s=14.5)


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


def _flooded(clock: Clock) -> tuple[LatencyFirstScheduler[str], list[object]]:
    """alice has had 40 s of engine time and queued long requests a minute ago (their deadlines are past)."""
    s: LatencyFirstScheduler[str] = LatencyFirstScheduler(clock=clock)
    s.charge("alice", 40.0)
    tickets = [s.submit(f"alice {i}", cost_s=30.0, tenant="alice") for i in range(4)]
    clock.advance(60_000)
    return s, tickets


def test_a_light_users_keystroke_goes_before_a_heavy_users_requests_long_past_their_deadlines() -> None:
    clock = Clock()
    s, _ = _flooded(clock)
    s.submit("bob types", cost_s=1.0, tenant="bob")  # due after every one of alice's: deadlines alone would wait
    clock.advance(10)
    assert s.next_batch(limit=1) == ["bob types"]
    assert s.next_batch(limit=1) == ["alice 0"]  # then alice's, by deadline


def test_a_heavy_users_running_request_gives_way_to_a_light_users_but_not_to_her_own_later_ones() -> None:
    clock = Clock()
    s, tickets = _flooded(clock)
    assert s.next_batch(limit=1) == ["alice 0"]
    assert not s.should_give_way(tickets[0], ran_s=20.0)  # only her own, due later, are queued
    s.submit("bob types", cost_s=1.0, tenant="bob")
    assert s.should_give_way(tickets[0], ran_s=0.1)  # a step later, bob goes first
    s.charge("alice", 0.1)  # her run so far, charged as it gives way
    clock.advance(10)
    assert s.next_batch(limit=1) == ["bob types"]


def test_two_busy_users_trade_the_engine_only_past_the_margin() -> None:
    clock = Clock()
    s: LatencyFirstScheduler[str] = LatencyFirstScheduler(clock=clock, margin_s=1.0)
    s.charge("alice", 5.0)
    s.charge("carol", 5.0)
    alice = s.submit("alice", cost_s=30.0, tenant="alice")
    assert s.next_batch(limit=1) == ["alice"]
    s.submit("carol", cost_s=30.0, tenant="carol")  # due later than alice's
    assert not s.should_give_way(alice, ran_s=0.9)  # within the margin: no trading at every step
    assert s.should_give_way(alice, ran_s=1.1)  # past it: carol's turn
    s.charge("alice", 1.1)
    clock.advance(10)
    assert s.next_batch(limit=1) == ["carol"]


def test_a_single_users_request_never_gives_way_to_its_own_later_ones_however_long_it_runs() -> None:
    clock = Clock()
    s: LatencyFirstScheduler[str] = LatencyFirstScheduler(clock=clock)
    first = s.submit("first", cost_s=30.0)
    assert s.next_batch(limit=1) == ["first"]
    s.charge(None, 100.0)
    clock.advance(5000)
    s.submit("second", cost_s=30.0)
    assert not s.should_give_way(first, ran_s=500.0)


def _serve(s: LatencyFirstScheduler[str], clock: Clock, name: str, tenant: str, seconds: float,
           cost_s: float = 1.0) -> None:
    """``tenant`` asks, is chosen and runs for ``seconds``."""
    s.submit(name, cost_s=cost_s, tenant=tenant)
    clock.advance(10)
    assert s.next_batch(limit=1) == [name]
    clock.advance(seconds * 1000)
    s.charge(tenant, seconds)


def test_a_user_back_from_idle_goes_first_for_at_most_the_arrival_credit() -> None:
    clock = Clock()
    s: LatencyFirstScheduler[str] = LatencyFirstScheduler(clock=clock, margin_s=1.0, credit_s=10.0)
    for i in range(10):  # alice alone for 100 s
        _serve(s, clock, f"alice {i}", "alice", 10.0)
    s.submit("alice again", cost_s=30.0, tenant="alice")  # she is 10 s ahead of the engine's time: her last run
    bob_served = 0.0
    while True:  # bob, idle all along, asks again and again, each due long before alice's
        s.submit("bob", cost_s=1.0, tenant="bob")
        clock.advance(10)
        chosen = s.next_batch(limit=1)
        if chosen == ["alice again"]:
            break
        assert chosen == ["bob"]
        clock.advance(2000)
        s.charge("bob", 2.0)
        bob_served += 2.0
    # his credit (10 s) and her lead (10 s), give or take the margin: not the 100 s she had before he came
    assert 18.0 <= bob_served <= 22.0
    assert s.share.snapshot()[0] > 0  # figures only: no user's name


def test_a_running_keystroke_gives_way_to_a_flooders_overdue_requests_only_past_the_margin() -> None:
    clock = Clock()
    s: LatencyFirstScheduler[str] = LatencyFirstScheduler(clock=clock, margin_s=1.0)
    s.charge("alice", 10.0)
    s.charge("bob", 10.5)  # bob has had a little more of the engine: the two are within the margin
    for i in range(4):
        s.submit(f"alice {i}", cost_s=8.0, tenant="alice")
    clock.advance(30_000)  # her requests are long past their deadlines
    bob = s.submit("bob types", cost_s=2.0, tenant="bob")
    clock.advance(10)
    assert s.next_batch(limit=1) == ["alice 0"]  # between two requests: the earliest deadline of either
    s.charge("alice", 1.6)  # she gave way past the margin
    clock.advance(10)
    assert s.next_batch(limit=1) == ["bob types"]
    assert not s.should_give_way(bob, ran_s=0.4)  # his decode steps do not alternate with her overdue ones
    assert not s.should_give_way(bob, ran_s=2.0)
    assert s.should_give_way(bob, ran_s=2.2)  # past the margin ahead of her: her turn


BOB_WORK_S, BOB_READING_S = 2.0, 0.5


def _bobs_mean_latency_s(alice_share: float, seconds: float = 600.0) -> float:
    """bob types: a request of 2 s of engine time, then 0.5 s of reading before the next; alice keeps four 30 s
    requests queued, each charged at ``alice_share`` of her engine time (what ``CompletionJob`` does with the
    request's ``ctx_share``). The engine runs in 0.1 s steps, asking ``should_give_way`` between them."""
    clock = Clock()
    s: LatencyFirstScheduler[str] = LatencyFirstScheduler(clock=clock)
    share = {"alice": alice_share, "bob": 1.0}
    left: dict[str, float] = {}
    tickets: dict[str, Ticket] = {}

    def ask(name: str, tenant: str, work_s: float) -> None:
        left[name] = work_s
        tickets[name] = s.submit(name, cost_s=work_s, tenant=tenant)

    for i in range(4):
        ask(f"alice {i}", "alice", 30.0)
    end, asked_at, next_ask, latencies, n = clock.now + seconds, None, clock.now, [], 0
    running: str | None = None
    ran = 0.0
    while clock.now < end:
        if asked_at is None and clock.now >= next_ask:
            n += 1
            ask(f"bob {n}", "bob", BOB_WORK_S)
            asked_at = clock.now
        if running is None:
            clock.advance(10)  # the gathering window
            chosen = s.next_batch(limit=1)
            if not chosen:
                continue
            running, ran = chosen[0], 0.0
        tenant = tickets[running].tenant
        assert tenant is not None
        clock.advance(100)
        ran += 0.1
        left[running] -= 0.1
        if left[running] <= 1e-9:
            s.charge(tenant, ran / share[tenant])
            if tenant == "bob":
                latencies.append(clock.now - asked_at)
                asked_at, next_ask = None, clock.now + BOB_READING_S
            else:
                ask(f"alice {len(left)}", "alice", 30.0)
            running = None
        elif s.should_give_way(tickets[running], ran / share[tenant]):
            s.charge(tenant, ran / share[tenant])
            s.submit(running, ticket=tickets[running])
            running = None
    return sum(latencies) / len(latencies)


def test_a_flooder_weighed_below_a_typist_costs_him_little_where_equal_weights_split_the_engine() -> None:
    equal, weighed = _bobs_mean_latency_s(1.0), _bobs_mean_latency_s(1 / 8)
    assert equal > 1.5 * BOB_WORK_S  # his demand (4/5 of the engine) is above half: equal shares make him wait
    assert weighed < 1.2 * BOB_WORK_S
