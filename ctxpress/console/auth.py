"""The console's pure security logic: admin passwords (bcrypt), session and CSRF tokens, the sign-in rate limit.

Nothing here touches a service: the tests exercise it directly (tests/ctxpress/console/test_auth.py).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import deque
from collections.abc import Callable

ADMIN_BCRYPT_ROUNDS = 12  # a sign-in is rare; a stolen table should cost an attacker
MIN_PASSWORD_CHARS = 12
MAX_PASSWORD_CHARS = 72  # bcrypt reads no further: a longer password would be accepted by its first 72 bytes
# A hash to check against when the name is unknown, so a wrong name takes as long as a wrong password.
_DUMMY_HASH = b"$2b$12$PiIs8VTnmxErs6Ubnjxy0.gRQLmwOC2GiqQvCewyDaeH4n/dzZ9OK"


def hash_password(password: str) -> str:
    import bcrypt

    check_new_password(password)
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(ADMIN_BCRYPT_ROUNDS)).decode()


def check_password(password: str, hashed: str | None) -> bool:
    """Whether ``password`` matches ``hashed``; None (no such admin) is checked against a dummy all the same."""
    import bcrypt

    candidate = password.encode()[:MAX_PASSWORD_CHARS]
    try:
        matches = bcrypt.checkpw(candidate, hashed.encode() if hashed else _DUMMY_HASH)
    except ValueError:  # a malformed stored hash never signs anyone in
        return False
    return matches and hashed is not None


def check_new_password(password: str) -> None:
    if len(password) < MIN_PASSWORD_CHARS:
        raise ValueError(f"a console password has at least {MIN_PASSWORD_CHARS} characters")
    if len(password.encode()) > MAX_PASSWORD_CHARS:
        raise ValueError(f"a console password has at most {MAX_PASSWORD_CHARS} bytes (bcrypt reads no further)")


def new_password() -> str:
    return secrets.token_urlsafe(18)  # 24 characters


def new_token() -> str:
    """A session's cookie value or a CSRF token: 256 random bits."""
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What the database keeps of a session token."""
    return hashlib.sha256(token.encode()).hexdigest()


def csrf_ok(expected: str, given: str | None) -> bool:
    """The form's token is the session's (compared in constant time); a missing one never is."""
    return bool(given) and hmac.compare_digest(expected.encode(), (given or "").encode())


class RateLimiter:
    """At most ``failures`` failed sign-ins per key (name and address) within ``window_s``; then the key waits until
    the oldest failure leaves the window. A success forgets the key's failures."""

    def __init__(self, failures: int, window_s: float, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = 10_000) -> None:
        self.failures = failures
        self.window_s = window_s
        self.clock = clock
        self.max_keys = max_keys
        self._seen: dict[str, deque[float]] = {}

    def _recent(self, key: str) -> deque[float]:
        now = self.clock()
        times = self._seen.get(key, deque())
        while times and now - times[0] >= self.window_s:
            times.popleft()
        return times

    def wait_s(self, key: str) -> float:
        """Seconds before ``key`` may try again; 0 when it may now."""
        times = self._recent(key)
        if len(times) < self.failures:
            return 0.0
        return max(0.0, self.window_s - (self.clock() - times[0]))

    def failed(self, key: str) -> None:
        times = self._recent(key)
        times.append(self.clock())
        if key not in self._seen and len(self._seen) >= self.max_keys:  # bounded memory under a spray of names
            self._seen.pop(next(iter(self._seen)))
        self._seen[key] = times

    def succeeded(self, key: str) -> None:
        self._seen.pop(key, None)
