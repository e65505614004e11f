"""The overview (``/``): each part up or down with its restarts, the engine's load and queue, model and kernel path,
the alerts, Triton's metrics with links to the Prometheus endpoints; and the audit log (``/audit``)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from aiohttp import web

from ctxpress.console.guard import state
from db import console as store


def ago(value: datetime | float | None) -> str:
    """'3 min ago' for a time (a datetime, or epoch seconds)."""
    if value is None:
        return "never"
    seconds = (time.time() - value) if isinstance(value, int | float) else (
        datetime.now(UTC) - value).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{max(seconds, 0):.0f} s ago"


async def overview(request: web.Request) -> web.Response:
    console = state(request)
    snapshot = await console.status.get()
    engine = snapshot.engine if snapshot else {}
    admission = engine.get("admission") or {}
    load = {
        "kv_type": engine.get("kv_type"), "kernels": engine.get("cpu_kernels"),
        "kv_used": engine.get("kv_cells_used"), "kv_cells": engine.get("kv_cells"),
        "threads": engine.get("threads"), "wait_p95": admission.get("wait_ms_p95"),
        "batches": admission.get("batches"), "gave_way": engine.get("gave_way"),
        "abandoned": engine.get("abandoned"),
    }
    return console.render(request, "overview.html", snapshot=snapshot, load=load)


async def audit_page(request: web.Request) -> web.Response:
    console = state(request)
    rows = await console.run(store.audit_rows, console.url, 300)
    return console.render(request, "audit.html", rows=rows)


def routes(app: web.Application) -> None:
    app.router.add_get("/", overview)
    app.router.add_get("/audit", audit_page)
