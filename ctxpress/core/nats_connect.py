"""Every NATS connection the project makes goes through ``connect``: where TLS is configured, it cannot be stripped.

nats-py upgrades a connection to TLS only when the server's INFO greeting says ``tls_required``; neither a
``tls://`` URL nor a TLS context forces it. Whoever can answer in the server's place (a spoofed address, a
redirected port) greets with ``auth_required`` and no ``tls_required`` and receives CONNECT with the password in
clear. ``connect`` refuses such a greeting, before anything is sent, whenever TLS was asked for: a ``tls://`` URL,
or a TLS context (every credential of a TLS-enabled appliance carries one, see ``NatsCredentials``). A credential
is sent in clear only where the configuration has no TLS at all (``CTXPRESS_NATS_TLS=false``, or a credentials
file without ``ca`` for a ``nats://`` URL): there is nothing to strip.

The check lives in an override of ``Client._process_info`` (nats-py 2.16, pinned in pyproject.toml), which nats-py
calls with the first INFO of every connection and reconnection, before it upgrades to TLS or writes CONNECT.
``tests/security/test_nats_tls_strip.py`` fails if a nats-py upgrade changes that order.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from nats.aio.client import Client
from nats.errors import Error as NatsError


class TlsNotOffered(NatsError):
    """The server did not ask for TLS although this client was configured to use it: nothing was sent to it.
    A ``nats.errors.Error``, so nats-py treats it as a failed attempt (next server, reconnect policy)."""


class _TlsRequiringClient(Client):
    async def _process_info(self, info: dict[str, Any], initial_connection: bool = False) -> None:
        # Only the greeting decides: later INFOs (cluster updates) come over the connection already set up.
        if initial_connection and not info.get("tls_required"):
            server = self._current_server.uri.netloc if self._current_server is not None else "the server"
            raise TlsNotOffered(f"nats: {server} did not offer TLS; this client requires it (a tls:// URL or a "
                                "TLS certificate authority is configured), so nothing was sent to it")
        await super()._process_info(info, initial_connection)


def tls_wanted(servers: str | list[str], options: dict[str, Any]) -> bool:
    """Whether the configuration asks for TLS: a ``tls://`` server, or a TLS context."""
    urls = [servers] if isinstance(servers, str) else list(servers)
    return options.get("tls") is not None or any(urlsplit(u if "://" in u else f"nats://{u}").scheme == "tls"
                                                 for u in urls)


async def connect(servers: str | list[str], **options: Any) -> Client:
    """``nats.connect``, refusing a server that does not require TLS when TLS is configured (see the module)."""
    client: Client = _TlsRequiringClient() if tls_wanted(servers, options) else Client()
    await client.connect(servers, **options)
    return client
