"""The probes that say whether a part answers: a TCP port, an HTTP health URL, a NATS request-reply."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from typing import Any

from ctxpress_core import identity
from ctxpress_core.settings import Settings


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def http_ok(url: str, timeout_s: float = 5.0) -> bool:
    # Generous timeout: on a 2-core machine a model loading next door can delay a health answer
    # by more than a second, and a refused connection still returns at once.
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def nats_answers(settings: Settings, subject: str, payload: bytes, expected_key: str) -> bool:
    """One request-reply round trip: does a JSON reply with ``expected_key`` come back? (In team mode the probe
    connects as the worker user, which may publish on the single-user subjects.)"""
    reply = nats_reply(settings, subject, payload)
    return reply is not None and expected_key in reply


def nats_reply(settings: Settings, subject: str, payload: bytes, timeout_s: float = 1.0) -> dict[str, Any] | None:
    """The JSON object a NATS request-reply round trip brings back, or None (no answer, not JSON)."""
    url = settings.nats_servers()
    try:
        options: dict[str, Any] = identity.service_connect_options(settings)
    except identity.TeamConfigError:
        return None  # `ctxpress up` said why before starting anything

    async def probe() -> dict[str, Any] | None:
        from nats.errors import NoRespondersError, TimeoutError

        from ctxpress_core import nats_connect

        try:
            nc = await nats_connect.connect(url, connect_timeout=1, max_reconnect_attempts=0, allow_reconnect=False,
                                            plaintext_credentials=not settings.nats_tls, **options)
        except Exception:
            return None
        try:
            reply = json.loads((await nc.request(subject, payload, timeout=timeout_s)).data)
            return reply if isinstance(reply, dict) else None
        except (NoRespondersError, TimeoutError, ValueError):
            return None
        finally:
            await nc.close()

    return asyncio.run(probe())
