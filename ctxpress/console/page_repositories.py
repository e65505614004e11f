"""Repositories (``/repositories``): each indexed repository's files and chunks, head commit and when it was indexed,
the index stream's pending events and dead letters (retry, discard), and a search box that shows what retrieval
finds (``ctxpress search``'s own function)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from sqlalchemy.exc import OperationalError

from ctxpress import dead_letters
from ctxpress.console.guard import back, state
from ctxpress.search import search
from ctxpress_core import identity
from db import console as store
from db import usage


async def repositories_page(request: web.Request) -> web.Response:
    console = state(request)
    rows = await console.run(usage.repositories, console.url)
    names = [r["name"] for r in rows]
    queue_error = None
    try:
        queue: dead_letters.IndexQueue | None = await asyncio.wait_for(dead_letters.queue(console.settings), 5.0)
    except (Exception, TimeoutError) as exc:  # NATS down: the page still shows the index
        queue, queue_error = None, f"{type(exc).__name__}: {exc}"[:300]
    query = request.query.get("q", "").strip()[:500]
    chosen = [r for r in request.query.getall("repo", []) if r in names]
    found: Any = None
    search_error = None
    if query:
        if not chosen:
            search_error = "choose at least one indexed repository to search"
        else:
            try:
                found = await console.run(search, console.settings, chosen, query, 10)
            except (ValueError, OperationalError) as exc:
                search_error = str(exc).splitlines()[0]
    return console.render(request, "repositories.html", rows=rows, queue=queue, queue_error=queue_error,
                          query=query, chosen=chosen, found=found, search_error=search_error)


async def dead_letter_action(request: web.Request) -> web.StreamResponse:
    console = state(request)
    verb = request.match_info["action"]
    if verb not in ("retry", "discard"):
        raise web.HTTPNotFound()
    form = await request.post()
    raw = form.get("seq", "")
    try:
        seq = int(raw) if isinstance(raw, str) and raw.isdigit() else None
        if seq is None or seq < 1:
            raise dead_letters.DeadLetterError("pick a dead letter (its sequence number)")
        if verb == "retry":
            letter = await dead_letters.retry(console.settings, seq)
            what = f"published again on {letter.subject}"
        else:
            await dead_letters.discard(console.settings, seq)
            what = "discarded"
        await console.run(store.audit, console.url, request["admin"], f"{verb} dead letter", str(seq), what)
        console.flash(request, "ok", f"dead letter {seq} {what}")
    except dead_letters.DeadLetterError as exc:
        console.flash(request, "error", str(exc))
    except identity.TeamConfigError as exc:
        console.flash(request, "error", f"NATS: {exc}")
    except Exception as exc:  # NATS unreachable, a JetStream error: say so, change nothing else
        console.flash(request, "error", f"NATS did not answer ({type(exc).__name__}); nothing was changed")
    raise back("/repositories")


def routes(app: web.Application) -> None:
    app.router.add_get("/repositories", repositories_page)
    app.router.add_post("/dead-letters/{action}", dead_letter_action)
