"""The editor's NATS client: requests to the appliance, with cancellation, and its reachability.

The editor keeps asking while the appliance is down, so a failure must cost nothing: while
unreachable, a request fails at once (a new connection is tried at most every few seconds), and
the state changes are reported once each, not per keystroke.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from ctxpress_core import nats_connect
from ctxpress_core.errors import CtxpressError
from ctxpress_core.identity import NatsCredentials
from ctxpress_core.settings import Settings, nats_servers
from ctxpress_core.wire.v1 import SUBJECT_CANCEL, SUBJECT_FILE_OPENED, SUBJECT_FILE_SAVED, CancelRequest

log = logging.getLogger("ctxpress.lsp")

RETRY_CONNECT_S = 3.0


CONNECT_S = 5.0


async def _probe(url: str) -> None:
    """Raise ``OSError`` at once when nothing listens at any server of ``url`` (a cluster's comma-separated list)."""
    failure: OSError | None = None
    for server in nats_servers(url):
        where = urlparse(server if "://" in server else f"nats://{server}")
        try:
            _reader, writer = await asyncio.wait_for(
                asyncio.open_connection(where.hostname or "127.0.0.1", where.port or 4222), 2.0)
        except (OSError, TimeoutError) as exc:
            failure = exc if isinstance(exc, OSError) else OSError(f"{server}: no answer in 2 s")
            continue
        writer.close()
        return
    raise failure or OSError(f"no NATS server in {url!r}")


def editor_subject(settings: Settings, credentials: NatsCredentials | None, kind: str) -> str:
    """Where an editor sends a ``complete``, ``file_opened``, ``feedback``, ``cancel`` or ``file_saved``:
    the user's own subjects in team mode (NATS lets a user publish nowhere else)."""
    if credentials is not None:
        return credentials.subject(kind)
    return {"complete": settings.completion_subject, "feedback": settings.feedback_subject,
            "file_opened": SUBJECT_FILE_OPENED, "cancel": SUBJECT_CANCEL, "file_saved": SUBJECT_FILE_SAVED}[kind]


class Unreachable(CtxpressError):
    """The appliance cannot be asked now (NATS down, or no worker listening)."""


class Appliance:
    def __init__(self, url: str, connect_options: dict[str, Any], on_state: Callable[[bool, str], None],
                 plaintext_credentials: bool = False) -> None:
        """``connect_options``: team mode's login (``NatsCredentials.connect_options``), else empty.
        ``plaintext_credentials``: the login may go in clear (``NatsCredentials.plaintext``)."""
        self.url = url
        self.connect_options = connect_options
        self.plaintext_credentials = plaintext_credentials
        self._on_state = on_state
        self._nc: Client | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()
        self._next_try = 0.0
        self.reachable: bool | None = None  # None: not tried yet
        self._background: set[asyncio.Task[Any]] = set()
        self._closing = False

    def _state(self, reachable: bool, why: str) -> None:
        """Reported on a change only; the first successful contact is not news."""
        if reachable != self.reachable and not self._closing:
            first = self.reachable is None
            self.reachable = reachable
            if not (first and reachable):
                self._on_state(reachable, why)

    async def _client(self) -> Client:
        if self._nc is not None and self._nc.is_connected:
            return self._nc
        if self._nc is not None and self._nc.is_reconnecting:
            raise Unreachable(f"NATS at {self.url} is reconnecting")
        async with self._connecting:
            if self._nc is not None and self._nc.is_connected:
                return self._nc
            if time.monotonic() < self._next_try:
                raise Unreachable(f"NATS at {self.url} did not answer; trying again shortly")
            self._next_try = time.monotonic() + RETRY_CONNECT_S

            async def disconnected() -> None:
                self._state(False, f"lost the connection to NATS at {self.url}")

            async def reconnected() -> None:
                self._state(True, f"connected to NATS at {self.url} again")

            async def error(exc: Exception) -> None:
                log.info("NATS: %s", exc)

            try:
                # nats-py retries a first connection as long as it would reconnect (for ever here):
                # see first whether anything listens, and bound the whole attempt.
                await _probe(self.url)
                nc = await asyncio.wait_for(nats_connect.connect(
                    nats_servers(self.url), name="ctxpress-lsp", connect_timeout=2, allow_reconnect=True,
                    max_reconnect_attempts=-1, reconnect_time_wait=1, **self.connect_options,
                    plaintext_credentials=self.plaintext_credentials,
                    disconnected_cb=disconnected, reconnected_cb=reconnected, error_cb=error), CONNECT_S)
            except Exception as exc:
                self._state(False, f"cannot connect to NATS at {self.url}: {exc or type(exc).__name__}")
                raise Unreachable(str(exc) or type(exc).__name__) from None
            self._nc = nc
            return nc

    async def request(self, subject: str, payload: bytes, timeout_s: float, cancel_id: str | None = None,
                      cancel_subject: str = SUBJECT_CANCEL) -> dict[str, Any]:
        """One request-reply. Cancelled (a newer keystroke, ``$/cancelRequest``): the appliance is
        told (``ctxpress.v1.cancel``) so it stops working on it."""
        nc = await self._client()
        try:
            reply = await nc.request(subject, payload, timeout=timeout_s)
        except NoRespondersError:
            self._state(False, f"no completion worker answers on {subject}")
            raise Unreachable(f"no completion worker answers on {subject}") from None
        except (NatsTimeout, asyncio.CancelledError):
            if cancel_id:
                self.publish_soon(cancel_subject, CancelRequest(request_id=cancel_id).model_dump_json().encode())
            raise
        self._state(True, f"connected to {self.url}")
        return json.loads(reply.data)

    async def ping(self, timeout_s: float = 2.0) -> None:
        """Raise ``Unreachable`` unless NATS answers a round trip now (a health check)."""
        nc = await self._client()
        try:
            await nc.flush(timeout=timeout_s)
        except Exception as exc:
            raise Unreachable(f"NATS at {self.url} did not answer: {exc or type(exc).__name__}") from None

    def publish_soon(self, subject: str, payload: bytes) -> None:
        """``publish`` without waiting for it."""
        task = asyncio.get_running_loop().create_task(self.publish(subject, payload))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def publish(self, subject: str, payload: bytes) -> bool:
        """Fire and forget (feedback, warm-ups, cancels): False when it could not be sent."""
        try:
            nc = await self._client()
            await nc.publish(subject, payload)
            return True
        except Exception as exc:
            log.info("not sent on %s: %s", subject, exc)
            return False

    async def close(self) -> None:
        self._closing = True
        if self._nc is not None and not self._nc.is_closed:
            try:
                await asyncio.wait_for(self._nc.drain(), timeout=2)
            except Exception:  # closing anyway
                await self._nc.close()
