"""Credentials files offered once: held in this process's memory under a random token, taken at the first download
or dropped after ``ttl_s``. Never written to disk, the database, a log or a page (the page holds only the token)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Offer:
    admin: str  # only the admin who made it may take it
    filename: str
    text: str
    expires: float


class OneTimeDownloads:
    def __init__(self, ttl_s: float = 600.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self._offers: dict[str, Offer] = {}

    def offer(self, admin: str, filename: str, text: str) -> str:
        now = self.clock()
        self._offers = {k: o for k, o in self._offers.items() if o.expires > now}
        token = secrets.token_urlsafe(24)
        self._offers[token] = Offer(admin, filename, text, now + self.ttl_s)
        return token

    def take(self, token: str, admin: str) -> Offer | None:
        """The offer, removed; None when unknown, expired, taken already, or made for another admin."""
        offer = self._offers.get(token)
        if offer is None or offer.admin != admin:
            return None
        del self._offers[token]
        return offer if offer.expires > self.clock() else None
