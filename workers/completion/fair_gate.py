"""The worker's per-user share (workers/fair_share.py) in front of its handlers: a request over its user's
share is answered ``rate_limited`` before its JSON is read, its text parsed or anything embedded."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ctxpress_core.errors import RateLimited
from ctxpress_core.wire.v1 import ErrorBody, ErrorResponse
from workers import metrics
from workers.fair_share import UserLimits


def refusal(exc: RateLimited) -> bytes:
    metrics.ERRORS.labels(exc.code.value).inc()
    return ErrorResponse(error=ErrorBody.of(exc)).model_dump_json().encode()


async def within_share(limits: UserLimits, user: str | None, work: Callable[[], Awaitable[bytes]],
                       inflight_retry_ms: float) -> bytes:
    """``work``'s reply, counted in flight for ``user`` while it runs; or ``rate_limited`` without running it."""
    try:
        limits.take(user, inflight_retry_ms)
    except RateLimited as exc:  # not logged one by one: a flood would fill the log
        return refusal(exc)
    with limits.held(user):
        return await work()


def within_rate(limits: UserLimits, user: str | None) -> bytes | None:
    """None when ``user`` may send one more message (feedback), else the ``rate_limited`` reply."""
    try:
        limits.take(user)
    except RateLimited as exc:
        return refusal(exc)
    return None
