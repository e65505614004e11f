"""What stands between a request and a page: the session (a server-side row found by the hash of the cookie's
token), the CSRF token of every POST, and the security headers of every answer."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import jinja2
from aiohttp import web

from ctxpress.console import auth
from ctxpress.console.downloads import OneTimeDownloads
from ctxpress.console.status import StatusCache
from ctxpress_core.settings import Settings
from db import console as store

T = TypeVar("T")
_PUBLIC = ("/login", "/static/")
_HEADERS = {
    # Nothing but this origin's own pages, styles and images; no script at all, no framing.
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


@dataclass
class ConsoleState:
    settings: Settings
    templates: jinja2.Environment
    limiter: auth.RateLimiter
    status: StatusCache
    downloads: OneTimeDownloads = field(default_factory=OneTimeDownloads)
    flashes: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.settings.effective_database_url()

    @property
    def secure(self) -> bool:
        return self.settings.console_tls()

    @property
    def cookie_name(self) -> str:
        # __Host-: the browser keeps it only from a secure origin, for this host, path / (no subdomain can set it)
        return "__Host-ctxpress-console" if self.secure else "ctxpress_console"

    @property
    def session_lifetime(self) -> timedelta:
        return timedelta(hours=self.settings.console_session_hours)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A blocking call (the database, bcrypt, NATS reloads) off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, functools.partial(fn, *args, **kwargs))

    def flash(self, request: web.Request, kind: str, message: str) -> None:
        self.flashes.setdefault(request["token_hash"], []).append((kind, message))

    def render(self, request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
        flashes = self.flashes.pop(request.get("token_hash", ""), [])
        body = self.templates.get_template(template).render(
            admin=request.get("admin"), csrf=request.get("csrf", ""), flashes=flashes, path=request.path, **context)
        return web.Response(text=body, content_type="text/html", status=status)


STATE: web.AppKey[ConsoleState] = web.AppKey("console_state", ConsoleState)


def state(request: web.Request) -> ConsoleState:
    return request.app[STATE]


def back(location: str) -> web.HTTPSeeOther:
    return web.HTTPSeeOther(location)


@web.middleware
async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                ) -> web.StreamResponse:
    try:
        response = await _checked(request, handler)
    except web.HTTPException as exc:
        response = exc
    for name, value in _HEADERS.items():
        response.headers.setdefault(name, value)
    if not request.path.startswith("/static/"):
        response.headers["Cache-Control"] = "no-store"  # pages name members and repositories
    if isinstance(response, web.HTTPException) and response.status >= 300:
        raise response
    return response


async def _checked(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                   ) -> web.StreamResponse:
    if request.path.startswith(_PUBLIC):
        return await handler(request)
    console = state(request)
    token = request.cookies.get(console.cookie_name)
    found = await console.run(store.find_session, console.url, auth.token_hash(token)) if token else None
    if found is None:
        if request.method in ("GET", "HEAD"):
            raise web.HTTPSeeOther("/login")
        raise web.HTTPForbidden(text="signed out: sign in again")
    request["admin"], request["csrf"] = found.admin, found.csrf_token
    request["token_hash"] = auth.token_hash(token or "")
    if request.method == "POST":
        form = await request.post()
        given = form.get("csrf")
        if not auth.csrf_ok(found.csrf_token, given if isinstance(given, str) else None):
            raise web.HTTPForbidden(text="the form's CSRF token is missing or wrong: reload the page and try again")
    elif request.method not in ("GET", "HEAD"):
        raise web.HTTPMethodNotAllowed(request.method, ["GET", "POST"])
    return await handler(request)


def set_session_cookie(console: ConsoleState, response: web.StreamResponse, token: str) -> None:
    response.set_cookie(console.cookie_name, token, httponly=True, samesite="Strict", secure=console.secure,
                        path="/", max_age=int(console.session_lifetime.total_seconds()))


def clear_session_cookie(console: ConsoleState, response: web.StreamResponse) -> None:
    response.del_cookie(console.cookie_name, path="/", secure=console.secure, httponly=True, samesite="Strict")
