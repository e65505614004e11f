"""Latency-first admission of requests to an engine.

Requests wait in two queues: fresh ones, released together once a short window (5 ms) has
passed since the oldest of them arrived or enough of them are there to fill a batch; and
urgent ones, which have already waited longer than the window and are always released first.
The batch size follows the traffic: the mean inter-arrival time of the last 100 requests says
how many requests one window is likely to gather, so a lone typist is never held for a batch
that will not come. Warm-ups (pre-processing a file's prompt ahead of time) are only admitted
when no live request waits. Speculative draft proposals never pass through here: the engine
makes them inside a request; only whole requests (whose verification steps an engine that
batches may interleave) are admitted.

The embedded CPU engine serves one request at a time, so there the scheduler decides order
only; an engine that batches takes the released list as one batch. Pure logic on an
injectable clock, unit-tested without threads.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

WINDOW_S = 0.005
HISTORY = 100


@dataclass
class _Entry(Generic[T]):
    item: T
    arrived: float
    warm: bool = False


@dataclass
class SchedulerStats:
    released: int = 0
    batches: int = 0
    urgent: int = 0
    warm: int = 0
    waits_ms: deque[float] = field(default_factory=lambda: deque(maxlen=1000))


class LatencyFirstScheduler(Generic[T]):
    def __init__(self, *, window_s: float = WINDOW_S, max_batch: int = 8,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.max_batch = max_batch
        self._clock = clock
        self._fresh: deque[_Entry[T]] = deque()
        self._warm: deque[_Entry[T]] = deque()
        self._arrivals: deque[float] = deque(maxlen=HISTORY)
        self.stats = SchedulerStats()

    def __len__(self) -> int:
        return len(self._fresh) + len(self._warm)

    def submit(self, item: T, *, warm: bool = False) -> None:
        now = self._clock()
        if warm:
            self._warm.append(_Entry(item, now, warm=True))
            return
        self._arrivals.append(now)
        self._fresh.append(_Entry(item, now))

    def mean_interarrival_s(self) -> float | None:
        if len(self._arrivals) < 2:
            return None
        return (self._arrivals[-1] - self._arrivals[0]) / (len(self._arrivals) - 1)

    def batch_size(self) -> int:
        """How many live requests one window is expected to gather (1 when traffic is sparse)."""
        gap = self.mean_interarrival_s()
        if gap is None or gap >= self.window_s:
            return 1
        return max(1, min(self.max_batch, math.ceil(self.window_s / max(gap, 1e-6))))

    def next_batch(self) -> list[T]:
        """The requests to admit now (possibly none: then ask again after ``wait_s``)."""
        now = self._clock()
        if self._fresh:
            urgent = [e for e in self._fresh if now - e.arrived > self.window_s]
            size = self.batch_size()
            oldest = self._fresh[0].arrived
            if urgent or len(self._fresh) >= size or now - oldest >= self.window_s:
                # urgent first (oldest first), then fresh ones in arrival order, up to the batch size
                take = max(size, len(urgent)) if urgent else size
                chosen = list(self._fresh)[:take]
                for e in chosen:
                    self._fresh.remove(e)
                self.stats.urgent += sum(1 for e in chosen if now - e.arrived > self.window_s)
                return self._release(chosen, now)
            return []
        if self._warm:
            return self._release([self._warm.popleft()], now)
        return []

    def wait_s(self) -> float | None:
        """Seconds until ``next_batch`` can release something (None: nothing queued)."""
        if self._fresh:
            return max(0.0, self._fresh[0].arrived + self.window_s - self._clock())
        return 0.0 if self._warm else None

    def _release(self, entries: list[_Entry[T]], now: float) -> list[T]:
        self.stats.batches += 1
        self.stats.released += len(entries)
        self.stats.warm += sum(e.warm for e in entries)
        self.stats.waits_ms.extend((now - e.arrived) * 1000 for e in entries)
        return [e.item for e in entries]
