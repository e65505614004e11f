"""Team mode's check in the workers: may this user use this repository?

The user is never taken from a payload: it is the ``<user>`` of ``ctxpress.v1.u.<user>.<kind>``, a subject NATS
lets only that user publish on (ctxpress/team.py). Grants are read from PostgreSQL and kept at most ``ttl_s``
(2 s), so ``ctxpress users revoke`` takes effect within that without restarting a worker, and a burst of
keystrokes costs one query per user every two seconds, not one per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.exc import SQLAlchemyError

from context import FileView
from ctxpress_core.errors import Forbidden, GrantsUnavailable
from ctxpress_core.identity import USER_KIND_HOOKS
from db.team import grants_of, kind_of

log = logging.getLogger("ctxpress.worker.grants")

GRANTS_TTL_S = 2.0
T = TypeVar("T")


@dataclass(frozen=True)
class Caller:
    """Who asked, and what of the index their request may read."""

    user: str | None  # None: the single-user appliance (nobody else can reach it)
    repositories: tuple[str, ...]  # the user's grants ∩ the requested repository: retrieval's scope
    # The user's account (db.team.grants_of): a user removed and added again under the same name is another
    # account, so the engine's KV (pool and disk tier) of the old one is never restored for the new one.
    account: str | None = None

    @property
    def kv_owner(self) -> str | None:
        """Whose engine cache a request reads and fills."""
        return self.account or self.user

    def view(self, text: str, digest: str) -> FileView:
        """The file of a request as this caller reads it."""
        return FileView(text, digest, self.user, self.repositories, self.kv_owner)

    def file_key(self, digest: str) -> str:
        """The worker's file store key: a content hash one user sent is no way for another to read the text."""
        return digest if self.user is None else f"{self.user}/{digest}"


class Grants:
    def __init__(self, database_url: str, ttl_s: float = GRANTS_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.database_url = database_url
        self.ttl_s = ttl_s
        self.clock = clock
        self._cache: dict[str, tuple[float, tuple[frozenset[str], str | None]]] = {}
        self._kinds: dict[str, tuple[float, str | None]] = {}

    async def _grants(self, user: str) -> tuple[frozenset[str], str | None]:
        return await self._cached(self._cache, user, grants_of, "grants", "the repository grants")

    async def trusted_publisher(self, user: str) -> bool:
        """Whether ``user``'s commit events may write the shared index: a hooks user (``ctxpress users hooks``, a CI
        runner or the canonical server's checkout), never a developer, whose commits nothing ties to a real one."""
        return await self._cached(self._kinds, user, kind_of, "kind", "the team's users") == USER_KIND_HOOKS

    async def _cached(self, cache: dict[str, tuple[float, T]], user: str, read: Callable[[str, str], T],
                      what: str, unavailable: str) -> T:
        """``read(database_url, user)``, kept in ``cache`` for ``ttl_s``."""
        now = self.clock()
        cached = cache.get(user)
        if cached is not None and now - cached[0] < self.ttl_s:
            return cached[1]
        try:
            found = await asyncio.get_running_loop().run_in_executor(None, read, self.database_url, user)
        except SQLAlchemyError as exc:
            # The driver's text names the database's host, port, user and what failed there: for the log, not for
            # whoever sent the request.
            log.warning("the %s of %r cannot be read: %s", what, user, str(exc).splitlines()[0])
            raise GrantsUnavailable(f"{unavailable} cannot be read now; try again later") from None
        cache[user] = (now, found)
        return found

    async def authorize(self, user: str | None, repository: str) -> Caller:
        """The caller for a request on ``repository``, or ``Forbidden``."""
        if user is None:
            raise Forbidden("team mode: requests are served on ctxpress.v1.u.<user>.* only, with your own "
                            "NATS credentials")
        repositories, account = await self._grants(user)
        scope = repositories & {repository}
        if not scope:
            raise Forbidden(f"user {user!r} has no grant for repository {repository!r}")
        return Caller(user, tuple(sorted(scope)), account)
