"""The bridge's bearer token: once one is configured, every request must carry it.

Loopback and a single user need none (whoever reaches 127.0.0.1 could read the user's files
anyway). Team mode (the bridge speaks with a user's NATS credentials) and any other address need
one: the bridge refuses to start without it.

Except a web page in the user's browser: it reaches 127.0.0.1 too. ``browser_guard_middleware`` refuses what
only a browser sends: a ``Host`` that is not the bridge's loopback name (DNS rebinding: ``evil.example``
resolved to 127.0.0.1, which would let the page read the answers) and an ``Origin`` of a web page (a cross-site
POST, which needs no read to spend the engine or send feedback). Editor clients send no ``Origin`` (Tabby's
agent, llama.vscode, llama.vim, Continue from the extension host) or a VS Code one (a webview): they pass.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from aiohttp import web

from ctxpress.http.replies import Handler, error_reply
from ctxpress_core.errors import CtxpressError
from ctxpress_core.identity import is_loopback
from ctxpress_core.settings import Settings

MIN_TOKEN_CHARS = 16


class AuthConfigError(CtxpressError):
    """The bridge cannot be started safely as configured."""


def configured_token(settings: Settings) -> str | None:
    """``CTXPRESS_HTTP_TOKEN``, else the first line of ``CTXPRESS_HTTP_TOKEN_FILE``, else None."""
    if settings.http_token is not None and settings.http_token.get_secret_value():
        token = settings.http_token.get_secret_value().strip()
    elif settings.http_token_file is not None:
        path = settings.http_token_file.expanduser()
        try:
            lines = path.read_text().strip().splitlines()
        except OSError as exc:
            raise AuthConfigError(f"cannot read CTXPRESS_HTTP_TOKEN_FILE {path}: {exc.strerror or exc}") from None
        token = lines[0].strip() if lines else ""
        if not token:
            raise AuthConfigError(f"CTXPRESS_HTTP_TOKEN_FILE {path} is empty")
    else:
        return None
    if len(token) < MIN_TOKEN_CHARS:
        raise AuthConfigError(f"the HTTP token is {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
                              "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`)")
    return token


def require_token_where_needed(token: str | None, host: str, team: bool) -> None:
    if token is not None:
        return
    if team:
        raise AuthConfigError("team mode: the bridge asks the appliance as your NATS user, so it needs a token "
                              "that only your editor knows: set CTXPRESS_HTTP_TOKEN or CTXPRESS_HTTP_TOKEN_FILE")
    if not is_loopback(host):
        raise AuthConfigError(f"listening on {host} (not loopback) lets other hosts use it: set CTXPRESS_HTTP_TOKEN "
                              "or CTXPRESS_HTTP_TOKEN_FILE, or listen on 127.0.0.1")


def bearer_token_middleware(token: str) -> Handler:
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Authorization", "").encode("utf-8", errors="replace")
        if not hmac.compare_digest(given, expected):
            return error_reply(401, "missing or wrong bearer token (Authorization: Bearer <CTXPRESS_HTTP_TOKEN>)",
                               {"WWW-Authenticate": 'Bearer realm="ctxpress"'})
        return await handler(request)

    return check  # type: ignore[return-value]


# Origins of an editor's own web views (VS Code and its forks), not of a web page.
EDITOR_ORIGIN_SCHEMES = frozenset({"vscode-webview", "vscode-file", "vscode"})


def _host_and_port(value: str) -> tuple[str, int | None]:
    parts = urlsplit(f"//{value}")
    try:
        return (parts.hostname or ""), parts.port
    except ValueError:  # a port that is not a number
        return "", -1


def browser_guard_middleware(host: str, port: int) -> Handler:
    """Refuse requests only a web page sends (see the module). ``host``, ``port``: where the bridge listens."""
    # Listening elsewhere than loopback, the bridge requires a token (require_token_where_needed), which a page
    # cannot know; the names it is reached by are then the operator's, not ours to list.
    check_host = is_loopback(host)

    def own(value: str) -> bool:
        name, given_port = _host_and_port(value)
        return is_loopback(name) and (port == 0 or given_port in (None, port))  # 0: the kernel chose it

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        given_host = request.headers.get("Host")
        if check_host and given_host is not None and not own(given_host):
            return error_reply(403, f"Host {given_host[:100]!r} is not this bridge's address (127.0.0.1 or "
                                    f"localhost, port {port}): refused (DNS rebinding)")
        origin = request.headers.get("Origin")
        if origin is not None:
            parts = urlsplit(origin)
            editor = parts.scheme in EDITOR_ORIGIN_SCHEMES
            same = parts.scheme in ("http", "https") and own(parts.netloc)
            if not (editor or same):
                return error_reply(403, f"requests from web pages (Origin {origin[:100]!r}) are refused; editors "
                                        "send no Origin")
        return await handler(request)

    return guard  # type: ignore[return-value]
