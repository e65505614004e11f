from __future__ import annotations

from ctxpress.lsp.debounce import MAX_DELAY_S, AdaptiveDebounce


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_explicit_invoke_never_waits_and_fixed_is_fixed() -> None:
    assert AdaptiveDebounce(clock=Clock()).delay_s(explicit=True) == 0.0
    assert AdaptiveDebounce(fixed_ms=150, clock=Clock()).delay_s(explicit=False) == 0.15


def test_fast_typing_and_a_slow_appliance_wait_longer() -> None:
    clock = Clock()
    slow_typist = AdaptiveDebounce(clock=clock)
    for _ in range(5):
        clock.now += 1.0
        slow_typist.keystroke()
    fast = AdaptiveDebounce(clock=clock)
    for _ in range(5):
        clock.now += 0.08
        fast.keystroke()
    assert fast.delay_s(explicit=False) > slow_typist.delay_s(explicit=False)
    before = fast.delay_s(explicit=False)
    fast.answered(1.2)
    assert fast.delay_s(explicit=False) > before
    fast.answered(60.0)
    assert fast.delay_s(explicit=False) <= MAX_DELAY_S
