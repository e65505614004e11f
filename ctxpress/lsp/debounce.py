"""How long to wait after a keystroke before asking: none when the user asked explicitly, longer
while they type fast (the request would be superseded by the next keystroke anyway) and when the
appliance is slow (each abandoned request still costs it a little)."""

from __future__ import annotations

import time
from collections.abc import Callable

FAST_TYPING_S = 0.25  # keystrokes closer than this are a burst
MAX_DELAY_S = 0.35
IDLE_DELAY_S = 0.02


class AdaptiveDebounce:
    def __init__(self, fixed_ms: int = 0, clock: Callable[[], float] = time.monotonic, alpha: float = 0.3) -> None:
        self.fixed_ms = fixed_ms  # > 0: always this; 0: adaptive
        self._clock = clock
        self._alpha = alpha
        self._last_key: float | None = None
        self.interval_s: float | None = None  # moving average of the gap between keystrokes
        self.latency_s: float | None = None  # moving average of the appliance's answers

    def keystroke(self) -> None:
        now = self._clock()
        if self._last_key is not None:
            gap = min(now - self._last_key, 2.0)  # a pause is not typing speed
            self.interval_s = gap if self.interval_s is None else _ema(self.interval_s, gap, self._alpha)
        self._last_key = now

    def answered(self, seconds: float) -> None:
        self.latency_s = seconds if self.latency_s is None else _ema(self.latency_s, seconds, self._alpha)

    def delay_s(self, *, explicit: bool) -> float:
        if explicit:
            return 0.0
        if self.fixed_ms > 0:
            return self.fixed_ms / 1000
        delay = IDLE_DELAY_S
        if self.interval_s is not None and self.interval_s < FAST_TYPING_S:
            delay = max(delay, 1.5 * self.interval_s)
        if self.latency_s is not None:
            delay += min(0.1 * self.latency_s, 0.15)
        return min(delay, MAX_DELAY_S)


def _ema(mean: float, value: float, alpha: float) -> float:
    return mean + alpha * (value - mean)
