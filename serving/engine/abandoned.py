"""Requests whose caller no longer waits: cancelled by id (``CANCEL_MODEL``), by the caller's stream
closing, or past their deadline. The Triton server watches each request it serves; the engine drops
one still queued and stops one running at its next prompt chunk or decode step."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass
class Watch:
    """One live request's cancellation state: cancelled by id, or past the caller's deadline."""

    request_id: str | None
    deadline: float | None
    cancelled: bool = False

    @property
    def watched(self) -> bool:
        return self.request_id is not None or self.deadline is not None

    def abandoned(self) -> bool:
        return self.cancelled or (self.deadline is not None and time.monotonic() > self.deadline)


class AbandonedRequests:
    """Requests whose caller no longer waits: cancelled (by id, through ``CANCEL_MODEL``, or by the
    caller's stream closing) or past their deadline. The engine drops one still queued and stops one
    running at its next prompt chunk or decode step (what it processed stays in the KV pool); the
    engine time they took is counted, against the time spent on requests served."""

    RECENT = 1024  # cancels that arrived before their request (kept for a while, bounded)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, Watch] = {}
        self._early: OrderedDict[str, float] = OrderedDict()
        self.by_stage: dict[str, int] = {"queued": 0, "prompt": 0, "decode": 0}
        self.abandoned_ms = 0.0
        self.served_ms = 0.0

    def watch(self, request_id: str | None, deadline: float | None) -> Watch:
        w = Watch(request_id, deadline)
        with self._lock:
            if request_id is not None:
                w.cancelled = self._early.pop(request_id, None) is not None
                self._live[request_id] = w
        return w

    def cancel(self, request_id: str) -> bool:
        """True when the request was live here."""
        with self._lock:
            w = self._live.get(request_id)
            if w is not None:
                w.cancelled = True
                return True
            self._early[request_id] = time.monotonic()
            while len(self._early) > self.RECENT:
                self._early.popitem(last=False)
            return False

    def forget(self, w: Watch, *, cancel: bool) -> None:
        with self._lock:
            if cancel:
                w.cancelled = True
            if w.request_id is not None and self._live.get(w.request_id) is w:
                del self._live[w.request_id]

    def record(self, stage: str, ms: float) -> None:
        with self._lock:
            self.by_stage[stage] += 1
            self.abandoned_ms += ms

    def record_served(self, ms: float) -> None:
        with self._lock:
            self.served_ms += ms

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {**self.by_stage, "abandoned_ms": round(self.abandoned_ms, 1), "served_ms": round(self.served_ms, 1)}
