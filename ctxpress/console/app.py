"""The console's aiohttp application: sign-in and sign-out, the pages (one module each), static files from the
wheel, and the server (``ctxpress console``): loopback by default, HTTPS with the team's certificate beyond it."""

from __future__ import annotations

import logging
import ssl
import sys
from pathlib import Path

import jinja2
from aiohttp import web

from ctxpress.console import auth, page_members, page_overview, page_repositories, page_usage
from ctxpress.console.guard import (
    STATE,
    ConsoleState,
    clear_session_cookie,
    guard,
    set_session_cookie,
    state,
)
from ctxpress.console.status import StatusCache
from ctxpress_core.settings import Settings
from db import console as store

log = logging.getLogger("ctxpress.console")
HERE = Path(__file__).resolve().parent
_MAX_FIELD = 4096


def make_app(settings: Settings, status_interval_s: float = 5.0) -> web.Application:
    templates = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True,
                                   undefined=jinja2.StrictUndefined)
    templates.filters["ago"] = page_overview.ago
    templates.filters["num"] = page_usage.num
    templates.filters["pct"] = page_usage.pct
    console = ConsoleState(settings, templates,
                           auth.RateLimiter(settings.console_login_failures, settings.console_login_window_s),
                           StatusCache(settings, status_interval_s))
    app = web.Application(middlewares=[guard], client_max_size=64 * 1024)
    app[STATE] = console
    app.router.add_get("/login", login_page)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    app.router.add_static("/static/", HERE / "static", show_index=False, follow_symlinks=False)
    for pages in (page_overview, page_members, page_repositories, page_usage):
        pages.routes(app)

    async def start(app: web.Application) -> None:
        console.status.start()

    async def stop(app: web.Application) -> None:
        await console.status.stop()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app


async def login_page(request: web.Request) -> web.Response:
    return state(request).render(request, "login.html", error=None, name="")


async def login(request: web.Request) -> web.StreamResponse:
    console = state(request)
    form = await request.post()
    name, password = str(form.get("name", ""))[:_MAX_FIELD].strip(), str(form.get("password", ""))[:_MAX_FIELD]
    key = f"{name}|{request.remote}"
    wait = console.limiter.wait_s(key)
    if wait > 0:
        return console.render(request, "login.html", status=429, name=name,
                              error=f"too many failed sign-ins for {name or 'this name'}: try again in {wait:.0f} s")
    hashed = await console.run(store.admin_password_hash, console.url, name) if name else None
    if not await console.run(auth.check_password, password, hashed):
        console.limiter.failed(key)
        log.warning("console sign-in refused for %s from %s", ascii(name[:64]), request.remote)
        return console.render(request, "login.html", status=401, name=name, error="wrong name or password")
    console.limiter.succeeded(key)
    token = auth.new_token()
    await console.run(store.create_session, console.url, auth.token_hash(token), name, auth.new_token(),
                      console.session_lifetime)
    await console.run(store.audit, console.url, name, "sign in", "", f"from {request.remote}")
    response = web.HTTPSeeOther("/")
    set_session_cookie(console, response, token)
    return response


async def logout(request: web.Request) -> web.StreamResponse:
    console = state(request)
    await console.run(store.end_session, console.url, request["token_hash"])
    await console.run(store.audit, console.url, request["admin"], "sign out")
    response = web.HTTPSeeOther("/login")
    clear_session_cookie(console, response)
    return response


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The team's certificate (ctxpress_core/tls.py) once the console is reachable beyond this machine."""
    if not settings.console_tls():
        return None
    from ctxpress_core.tls import ensure_tls_files

    files = ensure_tls_files(settings)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(files.cert, files.key)
    return context


def serve(settings: Settings, host: str | None = None, port: int | None = None) -> int:
    if host is not None or port is not None:
        settings = settings.model_copy(update={k: v for k, v in (("console_host", host), ("console_port", port))
                                               if v is not None})
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    from db.migrations import migrate

    migrate(settings.effective_database_url())
    log.info("console on %s", settings.console_url())
    web.run_app(make_app(settings), host=settings.console_host, port=settings.console_port,
                ssl_context=ssl_context(settings), print=None, access_log=None)
    return 0
