"""Members (``/members``): add a developer or a hooks user, rotate, grant and revoke repositories, remove; the
credentials file offered once for download after an add or a rotation. Each action is ``ctxpress.members``' (the
CLI's own), validated here first so a bad form gets a clear message."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from sqlalchemy.exc import OperationalError

from ctxpress import members
from ctxpress.console.guard import back, state
from ctxpress_core import identity
from db import console as store
from db import team as team_store
from db import usage

_ACTIONS = ("add", "rotate", "grant", "revoke", "remove")


async def members_page(request: web.Request) -> web.Response:
    console = state(request)
    rows = await console.run(team_store.list_users, console.url)
    seen = await console.run(usage.last_seen, console.url, [r.name for r in rows])
    known = await console.run(usage.repository_names, console.url)
    return console.render(request, "members.html", rows=rows, seen=seen, known=known,
                          team=identity.team_mode(console.settings))


def _form_text(form: Any, key: str, limit: int = 4096) -> str:
    value = form.get(key, "")
    return value.strip()[:limit] if isinstance(value, str) else ""


async def action(request: web.Request) -> web.StreamResponse:
    console = state(request)
    verb = request.match_info["action"]
    if verb not in _ACTIONS:
        raise web.HTTPNotFound()
    form = await request.post()
    actor = members.Actor(request["admin"], "console")
    name = _form_text(form, "name", 80)
    try:
        identity.validate_name(name)
        repos = members.repositories(_form_text(form, "repos")) if verb in ("add", "grant", "revoke") else []
        if verb == "add":
            kind = _form_text(form, "kind") or identity.USER_KIND_DEVELOPER
            text = await console.run(members.add, console.settings, actor, name, repos, kind)
            return _offer(request, name, text, f"added {kind} {name} with {', '.join(repos)}")
        if verb == "rotate":
            text = await console.run(members.rotate, console.settings, actor, name)
            return _offer(request, name, text, f"new password for {name}: the old file no longer logs in")
        if verb == "grant":
            await console.run(members.grant, console.settings, actor, name, repos)
            console.flash(request, "ok", f"{name} may now use {', '.join(repos)}")
        elif verb == "revoke":
            removed = await console.run(members.revoke, console.settings, actor, name, repos)
            console.flash(request, "ok", f"revoked {removed} grant(s) of {name}; the workers stop serving them "
                                         "within 2 s")
        else:
            if _form_text(form, "confirm") != name:
                raise ValueError(f"type the member's name ({name}) to confirm the removal")
            await console.run(members.remove, console.settings, actor, name)
            console.flash(request, "ok", f"removed {name} and their grants; their connections are closed")
    except (ValueError, team_store.UnknownUser, team_store.UserExists) as exc:
        console.flash(request, "error", str(exc))
    except identity.TeamConfigError as exc:
        console.flash(request, "error", f"NATS: {exc}")
    except OperationalError:
        console.flash(request, "error", "the database does not answer; nothing was changed")
    raise back("/members")


def _offer(request: web.Request, name: str, text: str, message: str) -> web.Response:
    console = state(request)
    token = console.downloads.offer(request["admin"], f"{name}.ctxpress-credentials.json", text)
    console.flash(request, "ok", message)
    return console.render(request, "download.html", name=name, token=token,
                          ttl_min=int(console.downloads.ttl_s // 60))


async def download(request: web.Request) -> web.StreamResponse:
    console = state(request)
    form = await request.post()
    token = _form_text(form, "token", 64)
    offer = console.downloads.take(token, request["admin"])
    if offer is None:
        console.flash(request, "error", "that credentials file was downloaded already or has expired: rotate the "
                                        "member for a new one")
        raise back("/members")
    await console.run(store.audit, console.url, request["admin"], "download credentials", offer.filename)
    return web.Response(body=offer.text.encode(), content_type="application/json", headers={
        "Content-Disposition": f'attachment; filename="{offer.filename}"'})


def routes(app: web.Application) -> None:
    app.router.add_get("/members", members_page)
    app.router.add_post("/members/download", download)
    app.router.add_post("/members/{action}", action)
