"""Admission to the engine: this worker's requests waiting on it, and how long one takes."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from ctxpress_core.errors import ErrorCode, RequestError
from workers import metrics


class EngineLoad:
    """This worker's requests waiting on the engine, and how long one takes (moving average): a
    request that would wait longer than its caller does is rejected at once (``overloaded``)
    instead of being queued to time out, leaving a backlog of work nobody waits for."""

    def __init__(self, prior_s: float = 2.0, alpha: float = 0.2) -> None:
        self.inflight = 0
        self.mean_s = prior_s
        self._alpha = alpha

    def expected_wait_s(self) -> float:
        return self.inflight * self.mean_s

    def admit(self, left_s: float) -> None:
        """Raise ``overloaded`` unless the requests ahead take less than the ``left_s`` seconds left to wait."""
        expected_s = self.expected_wait_s()
        if left_s <= 0 or expected_s > left_s:
            metrics.OVERLOADED.inc()
            raise RequestError(ErrorCode.OVERLOADED,
                               f"the engine is busy: {self.inflight} requests ahead, about "
                               f"{expected_s:.1f}s of work, and this request waits {max(left_s, 0):.1f}s")

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        self.inflight += 1
        started = time.perf_counter()
        ok = False
        try:
            yield
            ok = True
        finally:
            self.inflight -= 1
            elapsed = time.perf_counter() - started
            # A request that ended without an answer (timed out, cancelled) after longer than the estimate says
            # a request takes at least that long. Without it an engine too slow for every deadline never served
            # a request to learn from, and every request was accepted only to time out.
            if ok or elapsed > self.mean_s:
                self.mean_s += self._alpha * (elapsed - self.mean_s)
