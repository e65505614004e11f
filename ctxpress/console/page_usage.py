"""Usage and quality (``/usage``, ``/usage.csv``): per member, repository, language or editor door over a period,
requests, shown, accepted, acceptance rate, characters accepted, latency p50/p95 and its stages, cache hit share,
errors by code; charts over time; and which context sources the accepted suggestions used."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from typing import Any

from aiohttp import web

from ctxpress.console import charts
from ctxpress.console.guard import state
from db import usage

# The periods offered, and the width of a chart's bar for each.
PERIODS = {"1h": (timedelta(hours=1), timedelta(minutes=5)), "24h": (timedelta(hours=24), timedelta(hours=1)),
           "7d": (timedelta(days=7), timedelta(hours=6)), "30d": (timedelta(days=30), timedelta(days=1))}
DEFAULT_PERIOD = "7d"


def num(value: Any, digits: int = 0) -> str:
    return "–" if value is None else f"{float(value):,.{digits}f}"


def pct(value: Any) -> str:
    return "–" if value is None else f"{float(value):.1%}"


# What makes a spreadsheet read a cell as a formula (OWASP's CSV injection list): the keys are the clients' text
# (a language, a repository name), so a download must not run what a client wrote.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_text(value: Any) -> str:
    """A CSV cell of text that a spreadsheet shows as text: a leading apostrophe before a formula's first sign."""
    cell = str(value)
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell


def choice(request: web.Request) -> tuple[str, str]:
    """The period and grouping asked for; a value not offered is refused with what is."""
    period = request.query.get("period", DEFAULT_PERIOD)
    by = request.query.get("by", "member")
    if period not in PERIODS:
        raise web.HTTPBadRequest(text=f"period: one of {', '.join(PERIODS)}")
    if by not in usage.DIMENSIONS:
        raise web.HTTPBadRequest(text=f"by: one of {', '.join(usage.DIMENSIONS)}")
    return period, by


async def _figures(request: web.Request) -> tuple[str, str, dict[str, Any]]:
    console = state(request)
    period, by = choice(request)
    since, bucket = PERIODS[period]
    figures = await console.run(usage.usage, console.url, usage.period_start(since), by, bucket)
    return period, by, figures


async def usage_page(request: web.Request) -> web.Response:
    period, by, figures = await _figures(request)
    times = [row["at"] for row in figures["timeline"]]
    volume = charts.bars("completions over time", times, [
        ("requests", [float(r["requests"]) for r in figures["timeline"]]),
        ("shown", [float(r["shown"]) for r in figures["timeline"]]),
        ("accepted", [float(r["accepted"]) for r in figures["timeline"]])])
    latency = charts.line("p95 latency", times, [r["p95_ms"] for r in figures["timeline"]], " ms")
    return state(request).render(request, "usage.html", period=period, by=by, periods=list(PERIODS),
                                 dimensions=list(usage.DIMENSIONS), figures=figures, volume=volume, latency=latency)


async def usage_csv(request: web.Request) -> web.Response:
    period, by, figures = await _figures(request)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([by, *usage.SUMMARY_FIELDS])
    for row in figures["groups"]:
        writer.writerow([spreadsheet_text(row["key"]), *(row[f] for f in usage.SUMMARY_FIELDS)])
    return web.Response(text=out.getvalue(), content_type="text/csv", headers={
        "Content-Disposition": f'attachment; filename="ctxpress-usage-{by}-{period}.csv"'})


def routes(app: web.Application) -> None:
    app.router.add_get("/usage", usage_page)
    app.router.add_get("/usage.csv", usage_csv)
