"""Admission to the engine: this worker's requests waiting on it, whose they are, and how long one takes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Iterator

from ctxpress_core.errors import ErrorCode, RateLimited, RequestError
from workers import metrics


class EngineLoad:
    """This worker's requests waiting on the engine, per user, and how long one takes (moving average): a
    request that would wait longer than its caller does is rejected at once (``overloaded``) instead of being
    queued to time out, leaving a backlog of work nobody waits for.

    Fair sharing: the engine serves the earliest deadline first, so another user's long-deadline requests are
    not all ahead of this one. A request counts, of each other user's requests, at most one more than its own
    user holds (what round-robin between users would put ahead of it), and a user holds at most an equal share
    of ``slots`` (the engine's sequences) while another user has a request at the engine (``rate_limited``).
    The engine interleaves its sequences step by step, so another user's request delays this one by at most
    this user's own request time: each user's time is averaged apart, and another's long requests (256 tokens
    each) do not make a keystroke's short one look like it cannot be served in time."""

    def __init__(self, prior_s: float = 2.0, alpha: float = 0.2, slots: int = 4) -> None:
        self.mean_s = prior_s
        self.slots = slots
        self._alpha = alpha
        self._by_user: Counter[str | None] = Counter()
        self._user_mean_s: dict[str | None, float] = {}  # bounded by the users (a subject's user) seen
        self.idle = asyncio.Event()  # set while no request of this worker's is at the engine
        self.idle.set()

    @property
    def inflight(self) -> int:
        """This worker's requests at the engine, every user's: counted once, per user, in ``_by_user``."""
        return sum(self._by_user.values())

    def user_mean_s(self, user: str | None) -> float:
        return self._user_mean_s.get(user, self.mean_s)

    def expected_wait_s(self, user: str | None = None) -> float:
        """How long the requests ahead of a new request of ``user`` take, as fair sharing counts them."""
        own, mine = self._by_user[user], self.user_mean_s(user)
        others = sum(min(n, own + 1) * min(self.user_mean_s(u), mine) for u, n in self._by_user.items() if u != user)
        return own * mine + others

    def admit(self, left_s: float, user: str | None = None) -> None:
        """Raise ``rate_limited`` when ``user`` holds their share of the engine while others wait, else
        ``overloaded`` unless the requests ahead take less than the ``left_s`` seconds left to wait."""
        own = self._by_user[user]
        waiting = sum(1 for u, n in self._by_user.items() if u != user and n > 0)
        share = max(1, self.slots // (waiting + 1))
        if waiting and own >= share:
            raise RateLimited(f"{own} of your requests are at the engine, your share while {waiting} other "
                              f"user(s) wait", round(self.mean_s * 1000))
        expected_s = self.expected_wait_s(user)
        if left_s <= 0 or expected_s > left_s:
            metrics.OVERLOADED.inc()
            raise RequestError(ErrorCode.OVERLOADED,
                               f"the engine is busy: {self.inflight} requests ahead, about "
                               f"{expected_s:.1f}s of work, and this request waits {max(left_s, 0):.1f}s")

    @contextlib.contextmanager
    def track(self, user: str | None = None) -> Iterator[None]:
        self._by_user[user] += 1
        self.idle.clear()
        started = time.perf_counter()
        ok = False
        try:
            yield
            ok = True
        finally:
            self._by_user[user] -= 1
            if self._by_user[user] <= 0:
                del self._by_user[user]
            if not self._by_user:
                self.idle.set()
            elapsed = time.perf_counter() - started
            # A request that ended without an answer (timed out, cancelled) after longer than the estimate says
            # a request takes at least that long. Without it an engine too slow for every deadline never served
            # a request to learn from, and every request was accepted only to time out.
            if ok or elapsed > self.mean_s:
                self.mean_s += self._alpha * (elapsed - self.mean_s)
            mine = self._user_mean_s.get(user, self.mean_s)
            if ok or elapsed > mine:
                self._user_mean_s[user] = mine + self._alpha * (elapsed - mine)
