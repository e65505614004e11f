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

Within each queue, earliest deadline first: a request's deadline is its arrival plus its own
expected service time (the prompt tokens its engine must still process and the tokens it may
generate, at the engine's measured rates), so a keystroke whose prompt is nearly all in the KV
cache (~1 s) is not served after a cold 1,000-token prompt that arrived a moment before it
(~15 s on 2 cores), and a long request is never pushed back further than by requests due
before it: its wait is bounded by its own size. Requests submitted without a cost have their
arrival as deadline (arrival order).

Between users (``tenant``: the keyed hash of the user a request carries), engine time is shared
first, by start-time fair queuing (``EngineShare``): each user has a tag, the engine seconds it was
served, and the engine's virtual time is the tag of the user it last chose; a user who asks after
being idle starts at most ``ARRIVAL_CREDIT_S`` behind that time (what idling banks is bounded, and
it refills only as others are served), a user who kept it busy from its own tag. Only users whose
tag is within ``SHARE_MARGIN_S`` of the lowest are eligible; earliest deadline first among them.
So a colleague who types, and is idle between keystrokes, is served at once and without sharing
for up to that credit per keystroke, however much another has queued; two users who both keep the
engine busy get half each.
Deadlines alone do not share: a flood of long requests that waited past their own deadlines
would go before every keystroke of a colleague. ``should_give_way`` tells a running request,
between its prompt chunks and its decode steps, whether it should step aside (for a user clearly less
served, or for a request of its own user due before it), so it steps aside and is
submitted again with its original ticket. The margin keeps two busy users from trading the engine at every step.

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
# Engine seconds one user may be ahead of the least served one before the engine goes to the other:
# a keystroke of a user back from idle waits at most one step for a busy user's request; two busy users
# trade turns of about twice this.
SHARE_MARGIN_S = 1.0
# Engine seconds a user back from idle may be behind the engine's virtual time: a keystroke's request runs to
# its end before a busy colleague's turn comes back, even on a slow host under load (a request of ~1 s alone
# took ~6 s beside a flood on 2 cores).
ARRIVAL_CREDIT_S = 10.0
MAX_TENANTS = 1024


@dataclass(frozen=True)
class Ticket:
    """When a request first arrived, when it is due (arrival + expected service time), and whose it is."""

    arrived: float
    deadline: float
    tenant: str | None = None


@dataclass
class _Entry(Generic[T]):
    item: T
    queued: float  # when this entry was queued (a request that gave way: when it was queued again)
    deadline: float
    warm: bool = False
    tenant: str | None = None


class EngineShare:
    """Each user's tag in engine seconds, against the engine's virtual time (start-time fair queuing)."""

    def __init__(self, credit_s: float = ARRIVAL_CREDIT_S, max_tenants: int = MAX_TENANTS) -> None:
        self.credit_s = credit_s
        self.max_tenants = max_tenants
        self.virtual = 0.0  # the tag of the user chosen last
        self._tags: dict[str | None, float] = {}

    def tag(self, tenant: str | None) -> float:
        return self._tags.get(tenant, self.virtual - self.credit_s)

    def arrive(self, tenant: str | None) -> None:
        """A request of ``tenant`` is queued: a user far behind (idle) starts at most the credit behind."""
        self._tags[tenant] = max(self.tag(tenant), self.virtual - self.credit_s)
        if len(self._tags) > self.max_tenants:  # those furthest behind start from the virtual time anyway
            for t in sorted(self._tags, key=self.tag)[:len(self._tags) - self.max_tenants]:
                del self._tags[t]

    def chosen(self, tenant: str | None) -> None:
        self.virtual = max(self.virtual, self.tag(tenant))

    def charge(self, tenant: str | None, seconds: float) -> None:
        self._tags[tenant] = self.tag(tenant) + max(0.0, seconds)

    def snapshot(self) -> list[float]:
        """How far each user is ahead of the engine's virtual time, in seconds, most served first (no names:
        for the status file)."""
        return sorted((round(tag - self.virtual, 2) for tag in self._tags.values()), reverse=True)


@dataclass
class SchedulerStats:
    released: int = 0
    batches: int = 0
    urgent: int = 0
    warm: int = 0
    waits_ms: deque[float] = field(default_factory=lambda: deque(maxlen=1000))


class LatencyFirstScheduler(Generic[T]):
    def __init__(self, *, window_s: float = WINDOW_S, max_batch: int = 8, margin_s: float = SHARE_MARGIN_S,
                 credit_s: float = ARRIVAL_CREDIT_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.max_batch = max_batch
        self.margin_s = margin_s
        self.share = EngineShare(credit_s)
        self._clock = clock
        self._fresh: deque[_Entry[T]] = deque()
        self._warm: deque[_Entry[T]] = deque()
        self._arrivals: deque[float] = deque(maxlen=HISTORY)
        self.stats = SchedulerStats()

    def __len__(self) -> int:
        return len(self._fresh) + len(self._warm)

    def submit(self, item: T, *, warm: bool = False, cost_s: float = 0.0, ticket: Ticket | None = None,
               tenant: str | None = None) -> Ticket:
        """Queue ``item`` (``cost_s``: its expected service time; ``tenant``: whose it is). ``ticket``:
        a request that gave way is queued again with the ticket of its first submission: it keeps
        its arrival, deadline and tenant, and is not counted as a new arrival."""
        now = self._clock()
        self.share.arrive(ticket.tenant if ticket is not None else tenant)
        if warm:
            self._warm.append(_Entry(item, now, math.inf, warm=True, tenant=tenant))
            return Ticket(now, math.inf, tenant)
        if ticket is None:
            self._arrivals.append(now)
            ticket = Ticket(now, now + cost_s, tenant)
        # Urgency counts from now even for a request queued again: it would otherwise go before
        # the very request it gave way to (urgent first), only to give way again a chunk later.
        self._fresh.append(_Entry(item, now, ticket.deadline, tenant=ticket.tenant))
        return ticket

    def charge(self, tenant: str | None, seconds: float) -> None:
        """Count ``seconds`` of engine time (one run of a request, up to its end or its giving way)."""
        self.share.charge(tenant, seconds)

    def _eligibility(self, running: Ticket | None = None,
                     ran_s: float = 0.0) -> tuple[dict[str | None, float], float]:
        """Each queued user's tag (and the running request's user's, its run so far counted), and the highest
        tag that is eligible now."""
        tags = {e.tenant: self.share.tag(e.tenant) for e in self._fresh}
        if running is not None:
            tags[running.tenant] = self.share.tag(running.tenant) + ran_s
        return tags, min(tags.values()) + self.margin_s

    def should_give_way(self, running: Ticket, ran_s: float = 0.0) -> bool:
        """Whether the running request (its ticket; ``ran_s``: engine seconds of this run, not yet
        charged) should step aside: a queued live request of a user clearly less served than its
        own, or one of its own user's due before it. Not for another user's due earlier within the
        margin: a flood's requests, long past their own deadlines, are always due first, and a
        colleague's keystroke gave way to them at every decode step (docs/reliability.md)."""
        if not self._fresh:
            return False
        tags, cap = self._eligibility(running, ran_s)
        if tags[running.tenant] > cap:
            return True
        return any(e.tenant == running.tenant and e.deadline < running.deadline for e in self._fresh)

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

    def next_batch(self, limit: int | None = None) -> list[T]:
        """The requests to admit now (possibly none: then ask again after ``wait_s``).

        ``limit``: at most this many (an engine serving one request at a time takes one, the
        most urgent, and asks again when it is done, so that later arrivals due earlier than the
        rest of a window's gathering go first)."""
        now = self._clock()
        if self._fresh:
            def urgent(e: _Entry[T]) -> bool:
                return now - e.queued > self.window_s

            n_urgent = sum(map(urgent, self._fresh))
            size = self.batch_size()
            oldest = min(e.queued for e in self._fresh)
            if n_urgent or len(self._fresh) >= size or now - oldest >= self.window_s:
                take = max(size, n_urgent)
                take = min(take, limit) if limit else take
                tags, cap = self._eligibility()
                # the least served users first, then urgent ones, each by deadline
                chosen = sorted(self._fresh, key=lambda e: (tags[e.tenant] > cap, not urgent(e), e.deadline))[:take]
                for e in chosen:
                    self._fresh.remove(e)
                    self.share.chosen(e.tenant)
                self.stats.urgent += sum(map(urgent, chosen))
                return self._release(chosen, now)
            return []
        if self._warm:
            warm = self._warm.popleft()
            self.share.chosen(warm.tenant)
            return self._release([warm], now)
        return []

    def wait_s(self) -> float | None:
        """Seconds until ``next_batch`` can release something (None: nothing queued)."""
        if self._fresh:
            return max(0.0, min(e.queued for e in self._fresh) + self.window_s - self._clock())
        return 0.0 if self._warm else None

    def _release(self, entries: list[_Entry[T]], now: float) -> list[T]:
        self.stats.batches += 1
        self.stats.released += len(entries)
        self.stats.warm += sum(e.warm for e in entries)
        self.stats.waits_ms.extend((now - e.queued) * 1000 for e in entries)
        return [e.item for e in entries]
