"""Every NATS connection the project makes goes through ``connect``: a credential never travels in clear by accident.

nats-py upgrades a connection to TLS only when the server's INFO greeting says ``tls_required``; neither a
``tls://`` URL nor a TLS context forces it. Whoever can answer in the server's place (a spoofed address, a
redirected port) greets with ``auth_required`` and no ``tls_required`` and receives CONNECT with the password in
clear. ``connect`` refuses such a greeting, before anything is sent, when TLS was asked for (a ``tls://`` URL, or a
TLS context: every credential of a TLS-enabled appliance carries one, see ``NatsCredentials``) and whenever a
credential is sent, unless the caller says plain text is what was configured (``plaintext_credentials``:
``CTXPRESS_NATS_TLS=false`` for the services, a credentials file issued without ``ca`` for an editor).

The check lives in an override of ``Client._process_info`` (nats-py 2.16, pinned in pyproject.toml), which nats-py
calls with the first INFO of every connection and reconnection, before it upgrades to TLS or writes CONNECT.
``tests/security/test_nats_tls_strip.py`` fails if a nats-py upgrade changes that order.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from nats.aio.client import Client
from nats.errors import Error as NatsError

from ctxpress_core.errors import CtxpressError


class TlsNotOffered(CtxpressError, NatsError):
    """The server did not ask for TLS although this client was configured to use it: nothing was sent to it.
    Also a ``nats.errors.Error``, so nats-py treats it as a failed attempt (next server, reconnect policy)."""


class _TlsRequiringClient(Client):
    async def _process_info(self, info: dict[str, Any], initial_connection: bool = False) -> None:
        # Only the greeting decides: later INFOs (cluster updates) come over the connection already set up.
        if initial_connection and not info.get("tls_required"):
            server = self._current_server.uri.netloc if self._current_server is not None else "the server"
            raise TlsNotOffered(f"nats: {server} did not offer TLS; this client requires it (TLS is configured, or "
                                "a credential would be sent; CTXPRESS_NATS_TLS=false allows plain text), so "
                                "nothing was sent to it")
        await super()._process_info(info, initial_connection)


def tls_wanted(servers: str | list[str], options: dict[str, Any]) -> bool:
    """Whether the configuration asks for TLS: a ``tls://`` server, or a TLS context."""
    urls = [servers] if isinstance(servers, str) else list(servers)
    return options.get("tls") is not None or any(urlsplit(u if "://" in u else f"nats://{u}").scheme == "tls"
                                                 for u in urls)


# The options of nats-py's connect that make it send a secret in CONNECT.
_CREDENTIAL_OPTIONS = ("user", "password", "token", "user_credentials", "nkeys_seed", "nkeys_seed_str",
                       "user_jwt_cb", "signature_cb")


def sends_credential(servers: str | list[str], options: dict[str, Any]) -> bool:
    """Whether CONNECT would carry a secret: a credential option, or one in a URL (``nats://user:pass@host``)."""
    urls = [servers] if isinstance(servers, str) else list(servers)
    return any(options.get(name) is not None for name in _CREDENTIAL_OPTIONS) or any(
        urlsplit(u if "://" in u else f"nats://{u}").username is not None for u in urls)


async def _quiet(exc: Exception) -> None:
    pass


def one_attempt(options: dict[str, Any]) -> dict[str, Any]:
    """The options of a connection that must not be retried (``allow_reconnect=False``), as nats-py 2.16 needs them.

    nats-py retries a first connection whose TCP connect fails forever when ``max_reconnect_attempts`` is 0 (its "no
    limit"), whatever ``allow_reconnect`` says: a probe of a NATS that is down never returned, and logged a
    traceback every 2 s. 1 is its fewest (one retry), here without the wait before it. The caller learns of the
    failure from the exception, so the attempts are not logged as well, unless it passed its own ``error_cb``."""
    if options.get("allow_reconnect", True):
        return options
    return {"error_cb": _quiet, **options, "max_reconnect_attempts": 1, "reconnect_time_wait": 0}


async def connect(servers: str | list[str], *, plaintext_credentials: bool = False, **options: Any) -> Client:
    """``nats.connect``, refusing a server that does not require TLS where TLS is configured or a credential is
    sent (``plaintext_credentials``: the configuration says this one may go in clear; see the module). With
    ``allow_reconnect=False``, one attempt and its retry, whatever nats-py would do (``one_attempt``)."""
    require_tls = tls_wanted(servers, options) or (sends_credential(servers, options) and not plaintext_credentials)
    client: Client = _TlsRequiringClient() if require_tls else Client()
    await client.connect(servers, **one_attempt(options))
    return client
