"""``ctxpress serve-http``: one aiohttp server holding every door, and its start and stop."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from collections import Counter

from aiohttp import web

from ctxpress.http import continue_fim, llama_cpp, tabby
from ctxpress.http.auth import (
    AuthConfigError,
    bearer_token_middleware,
    browser_guard_middleware,
    configured_token,
    require_token_where_needed,
)
from ctxpress.http.replies import Handler, HttpError, errors_as_json
from ctxpress.http.upstream import Upstream
from ctxpress_core.identity import NatsCredentials, TeamConfigError, load_credentials, team_mode
from ctxpress_core.settings import Settings

log = logging.getLogger("ctxpress.http")

APIS = ("llama.cpp: GET /health, POST /infill (llama.vscode, llama.vim)",
        "Tabby: GET /v1/health, POST /v1/completions {segments}, POST /v1/events (Tabby's VS Code, JetBrains, Vim "
        "plugins)",
        "FIM: POST /v1/fim/completions, POST /v1/completions {prompt, suffix} (Continue), SSE with stream: true")
UPSTREAM = web.AppKey("upstream", Upstream)
SERVED = web.AppKey("served", Counter)


def build_app(settings: Settings, upstream: Upstream, token: str | None, host: str, port: int) -> web.Application:
    """Every door, behind the guards: no request a web page makes (``browser_guard_middleware``), and the bearer
    token when one is configured. ``host``, ``port``: where the bridge listens."""
    served: Counter[str] = Counter()

    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        served["2xx" if response.status < 400 else "refused"] += 1
        return response

    middlewares: list[Handler] = [count, errors_as_json, browser_guard_middleware(host, port)]  # type: ignore[list-item]
    if token is not None:
        middlewares.append(bearer_token_middleware(token))
    app = web.Application(middlewares=middlewares, client_max_size=settings.max_request_bytes)
    app[UPSTREAM] = upstream
    app[SERVED] = served
    shown = tabby.Shown()

    async def completions(request: web.Request) -> web.StreamResponse:
        """Tabby's (``segments``) and OpenAI's (``prompt``) completions share the path."""
        raw = await request.read()
        try:
            probe = json.loads(raw)
        except ValueError as exc:
            raise HttpError(400, f"invalid request body: not JSON ({exc})") from None
        if isinstance(probe, dict) and "segments" in probe:
            return await tabby.tabby_completion(request, upstream, shown, raw)
        return await continue_fim.fim_completion(request, upstream, raw, chat_shaped=False)

    async def fim(request: web.Request) -> web.StreamResponse:
        return await continue_fim.fim_completion(request, upstream, await request.read(), chat_shaped=True)

    app.add_routes([*llama_cpp.routes(upstream), *tabby.routes(upstream, shown),
                    web.post("/v1/completions", completions), web.post("/v1/fim/completions", fim)])

    async def close_upstream(_app: web.Application) -> None:
        await upstream.close()

    app.on_cleanup.append(close_upstream)
    return app


def serve(settings: Settings, host: str | None = None, port: int | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    host = host or settings.http_host or settings.bind_host
    port = settings.http_port if port is None else port
    credentials: NatsCredentials | None = None
    try:
        if settings.nats_credentials is not None:
            credentials = load_credentials(settings.nats_credentials)
        token = configured_token(settings)
        require_token_where_needed(token, host, credentials is not None or team_mode(settings))
    except (AuthConfigError, TeamConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(settings, host, port, credentials, token))
    except OSError as exc:
        print(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 1


async def _run(settings: Settings, host: str, port: int, credentials: NatsCredentials | None,
               token: str | None) -> int:
    upstream = Upstream(settings, credentials)
    app = build_app(settings, upstream, token, host, port)
    # handler_cancellation: a request whose client went away is cancelled, here and in the appliance
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        print(f"ctxpress serve-http: listening on http://{host}:{port} "
              f"({'bearer token required' if token else 'no token'}; appliance at {upstream.appliance.url}"
              f"{f' as {credentials.user}' if credentials else ''})", flush=True)
        for api in APIS:
            print(f"  {api}", flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()
    served = app[SERVED]
    print(f"ctxpress serve-http: stopped; {served['2xx']} requests served, {served['refused']} refused", flush=True)
    return 0
