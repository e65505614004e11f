"""Each user's own share of a service: requests held at once, and requests per second (a token bucket).

The gateway and every completion worker keep one ``UserLimits`` for requests and one for feedback. A user
over their share is answered ``rate_limited`` with ``retry_after_ms`` (``ctxpress_core.errors.RateLimited``)
before anything costly is done for the request (its JSON is not even read), so one teammate's flood costs the
others nothing but the refusals. The key is the user of the subject (NATS lets a user publish on their own
subjects only). A single-user appliance (user None) has nobody to share with: its one developer's editors and
benchmarks are bounded by the engine's admission (``overloaded``) alone, as before.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ctxpress_core.errors import RateLimited
from ctxpress_core.settings import Settings

# A request refused for the requests a user already has in flight: how soon one of them is likely done, when the
# caller does not say (a keystroke's completion on the CPU engine takes a few hundred milliseconds).
DEFAULT_INFLIGHT_RETRY_MS = 250
# Users' entries kept while idle (no request held, bucket full) before such entries are forgotten.
MAX_IDLE_ENTRIES = 1024
_EPSILON = 1e-6
# A user refused for their share within this many seconds is flooding: the engine weighs their requests at
# ``Settings.flooding_share`` of a colleague's (serving.engine.scheduler), so whoever stays within the limits is
# served first; one who stops is weighed as anyone again half a minute later.
FLOODING_WINDOW_S = 30.0


class Flooding:
    """The users refused for their share within the last ``FLOODING_WINDOW_S`` (by this process's limits, or by
    the gateway in front of it: ``ctxpress_core.wire.v1.HEADER_FLOODING``). Bounded: the oldest are forgotten."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._refused_at: dict[str, float] = {}

    def mark(self, user: str | None) -> None:
        if user is None:
            return
        self._refused_at.pop(user, None)
        self._refused_at[user] = self._clock()
        while len(self._refused_at) > MAX_IDLE_ENTRIES:
            del self._refused_at[next(iter(self._refused_at))]

    def __contains__(self, user: str | None) -> bool:
        at = self._refused_at.get(user) if user is not None else None
        return at is not None and self._clock() - at < FLOODING_WINDOW_S


@dataclass
class _UserState:
    tokens: float
    updated: float
    inflight: int = 0


class UserLimits:
    """``max_inflight`` requests held at once (0: no cap) and ``rate_per_s`` requests a second with bursts of
    ``burst`` (0 per second: no rate limit), per user. Pure bookkeeping on one event loop (no lock)."""

    def __init__(self, max_inflight: int, rate_per_s: float, burst: int,
                 clock: Callable[[], float] = time.monotonic, flooding: Flooding | None = None) -> None:
        self.flooding = flooding if flooding is not None else Flooding(clock)  # marked at each refusal
        self.max_inflight = max_inflight
        self.rate_per_s = rate_per_s
        self.burst = max(1, burst)
        self._clock = clock
        self._users: dict[str | None, _UserState] = {}

    @classmethod
    def requests(cls, settings: Settings, flooding: Flooding | None = None) -> UserLimits:
        return cls(settings.user_max_inflight, settings.user_requests_per_s, settings.user_request_burst,
                   flooding=flooding)

    @classmethod
    def feedback(cls, settings: Settings, flooding: Flooding | None = None) -> UserLimits:
        """Feedback holds nothing in flight; two events per suggestion (shown, then accepted or dismissed)."""
        return cls(0, 2 * settings.user_requests_per_s, 2 * settings.user_request_burst, flooding=flooding)

    def inflight(self, user: str | None) -> int:
        state = self._users.get(user)
        return 0 if state is None else state.inflight

    def take(self, user: str | None, inflight_retry_ms: float = DEFAULT_INFLIGHT_RETRY_MS) -> None:
        """Count one request of ``user`` against the rate, or raise ``RateLimited`` (nothing counted) when they
        hold ``max_inflight`` already or their bucket is empty. No limit for the single user (None)."""
        if user is None:
            return
        state = self._state(user)
        try:
            self._take(state, inflight_retry_ms)
        except RateLimited:
            self.flooding.mark(user)
            raise

    def _take(self, state: _UserState, inflight_retry_ms: float) -> None:
        if self.max_inflight and state.inflight >= self.max_inflight:
            raise RateLimited(f"{state.inflight} requests of yours are in flight (at most {self.max_inflight} at once)",
                              round(inflight_retry_ms))
        if self.rate_per_s <= 0:
            return
        if state.tokens < 1.0 - _EPSILON:  # (a token refilled over 0.1 s at 10/s is 0.9999…)
            wait_ms = (1.0 - state.tokens) / self.rate_per_s * 1000
            raise RateLimited(f"more than {self.rate_per_s:g} requests a second (bursts of {self.burst})",
                              max(1, math.ceil(wait_ms - _EPSILON)))
        state.tokens = max(0.0, state.tokens - 1.0)

    @contextlib.contextmanager
    def hold(self, user: str | None, inflight_retry_ms: float = DEFAULT_INFLIGHT_RETRY_MS) -> Iterator[None]:
        """One request of ``user`` held while the block runs (``take`` first: refused, nothing is held)."""
        self.take(user, inflight_retry_ms)
        with self.held(user):
            yield

    @contextlib.contextmanager
    def held(self, user: str | None) -> Iterator[None]:
        """One request of ``user`` counted in flight while the block runs (``take`` has admitted it)."""
        if user is None:
            yield
            return
        state = self._state(user)
        state.inflight += 1
        try:
            yield
        finally:
            state.inflight -= 1

    def _state(self, user: str | None) -> _UserState:
        now = self._clock()
        state = self._users.get(user)
        if state is None:
            if len(self._users) >= MAX_IDLE_ENTRIES:
                self._forget_idle(now)
            state = self._users[user] = _UserState(tokens=float(self.burst), updated=now)
        elif self.rate_per_s > 0:
            state.tokens = min(float(self.burst), state.tokens + (now - state.updated) * self.rate_per_s)
            state.updated = now
        return state

    def _forget_idle(self, now: float) -> None:
        """An idle user's entry says nothing a fresh one would not (a full bucket, nothing held)."""
        for user, state in list(self._users.items()):
            refilled = state.tokens + (now - state.updated) * self.rate_per_s
            if state.inflight == 0 and (self.rate_per_s <= 0 or refilled >= self.burst):
                del self._users[user]
