"""The usage pages' rollup (``usage_hourly`` and ``usage_daily``, migration 9): the telemetry of each closed hour
summed once, and each whole day's hours summed again, so a month's page reads a few thousand rows instead of every
completion.

A cell is one hour × one value of one dimension (member, repository, language, editor door; and, for the pages'
side tables, context source and error code): requests, shown, accepted, characters accepted, errors, the sums and
counts of the stage timings and of the prompt and cached tokens, and a histogram of the total latency over the fixed
buckets ``LATENCY_BOUNDS_MS`` from which p50/p95 are read (``percentile``). The raw rows and the rollup give the
same cells (``cells_sql`` is the one definition of a cell, used both to roll up and to read the hours not rolled).

An hour is rolled once it has been over for ``SETTLE`` (an event's ``created_at`` is the time it was written, so a
closed hour gains no rows after that unless a telemetry write stays open that long). Feedback may come later than
its completion's hour: each refresh re-rolls the hours whose completions got feedback since the last refresh.
Rolling is idempotent (an hour's cells are deleted and written again in one transaction) and serialized by an
advisory lock: whoever holds it rolls, the others read the raw rows of what is not rolled yet. A day's cells are
made again from its hours whenever one of them is (re)rolled, once the whole day is rolled.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import Connection, text

SETTLE = timedelta(minutes=5)
ORIGIN = "TIMESTAMPTZ '2000-01-01 00:00:00+00'"  # cells and chart bars start on whole UTC hours, in any time zone
_LOCK_KEY = 0x75736167  # "usag": one roller at a time

# The latency histogram's bucket edges (ms): 5 ms wide up to 50 ms, then at most 20 % of the value up to 6.4 s.
# Bucket 0 is below the first edge, bucket i is [edge i-1, edge i), the last is the last edge and above. Changing
# them needs a migration that empties usage_hourly and usage_rollup_state (the stored histograms use these edges).
LATENCY_BOUNDS_MS: tuple[float, ...] = (
    *range(5, 50, 5), *range(50, 100, 10), *range(100, 200, 20), *range(200, 400, 40), *range(400, 800, 80),
    *range(800, 1600, 160), 1600, 1900, 2200, 2500, 2800, 3200, 3800, 4400, 5000, 5600,
    6400, 8000, 10000, 12000, 15000, 20000, 30000, 60000)
BUCKETS = len(LATENCY_BOUNDS_MS) + 1

# How an event is keyed in each dimension: a fixed list, never a caller's text.
DIMENSIONS = {
    "member": "coalesce(ev.user_name, '(single user)')",
    "repository": "ev.repository",
    "language": "coalesce(ev.language, '(unknown)')",
    "door": "ev.scenario",
}

_COUNTERS = ("requests", "shown", "accepted", "chars_accepted", "errors", "queue_ms", "queue_n", "context_ms",
             "context_n", "prompt_ms", "prompt_n", "decode_ms", "decode_n", "prompt_tokens", "cached_tokens")
COLUMNS = (*_COUNTERS, "latency")


def bucket_of(ms: float) -> int:
    """The histogram bucket of a latency (as PostgreSQL's ``width_bucket`` puts it)."""
    return bisect_right(LATENCY_BOUNDS_MS, ms)


def bucket_range(index: int) -> tuple[float, float]:
    """The latencies bucket ``index`` holds: [low, high); the last one's high is infinite."""
    low = 0.0 if index == 0 else float(LATENCY_BOUNDS_MS[index - 1])
    return low, math.inf if index == len(LATENCY_BOUNDS_MS) else float(LATENCY_BOUNDS_MS[index])


def percentile(counts: Sequence[int], q: float) -> float | None:
    """The q-quantile read from a histogram: inside the bucket that holds the exact value (the one
    ``percentile_disc`` gives), placed linearly by its rank among the bucket's counts; None when empty. In the
    open last bucket it is that bucket's lower edge."""
    total = sum(counts)
    if total == 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            low, high = bucket_range(index)
            if math.isinf(high):
                return low
            return low + (high - low) * (rank - seen - 0.5) / count
        seen += count
    raise AssertionError("unreachable: rank <= total")


def cells_sql(events: str, cell: str, dimensions: str) -> str:
    """The cells of the events that the subquery ``events`` selects (aliased ``e``), per ``cell`` (an interval
    expression: an hour to roll up, or a chart bar when bars are shorter) and per dimension in ``dimensions`` (an
    SQL array expression). Columns: ``at``, ``dimension``, ``key``, then ``COLUMNS``."""
    edges = "'{" + ",".join(str(b) for b in LATENCY_BOUNDS_MS) + "}'::float8[]"
    keys = ", ".join(f"('{name}', {expr})" for name, expr in DIMENSIONS.items())
    histogram = ", ".join(f"count(*) FILTER (WHERE lat = {i})" for i in range(BUCKETS))
    stages = ", ".join(f"sum({s}_ms::float8) AS {s}_ms, count({s}_ms) AS {s}_n"
                       for s in ("queue", "context", "prompt", "decode"))
    return f"""
    WITH ev AS MATERIALIZED (
        SELECT date_bin({cell}, e.created_at, {ORIGIN}) AS at, e.user_name, e.repository, e.language, e.scenario,
               e.sources, e.outcome, e.error_code, e.queue_ms, e.context_ms, e.prompt_ms, e.decode_ms,
               e.prompt_tokens, e.cached_tokens,
               CASE WHEN e.outcome <> 'error' THEN width_bucket(e.total_ms::float8, {edges}) END AS lat,
               fb.shown IS NOT NULL AS shown, coalesce(fb.accepted, false) AS accepted, coalesce(fb.chars, 0) AS chars
        FROM {events} e
        LEFT JOIN LATERAL (
            SELECT true AS shown, bool_or(f.action = 'accepted') AS accepted,
                   sum(f.chars_kept) FILTER (WHERE f.action = 'accepted') AS chars
            FROM completion_feedback f WHERE f.completion_id = e.request_id HAVING count(*) > 0) fb ON true
    ), keyed AS (
        SELECT d.dimension, d.key, ev.* FROM ev CROSS JOIN LATERAL (VALUES {keys}) AS d(dimension, key)
        UNION ALL SELECT 'source', s.source, ev.* FROM ev CROSS JOIN unnest(ev.sources) AS s(source)
        UNION ALL SELECT 'error', coalesce(ev.error_code, '?'), ev.* FROM ev WHERE ev.outcome = 'error'
    )
    SELECT at, dimension, key, count(*) AS requests, count(*) FILTER (WHERE shown) AS shown,
           count(*) FILTER (WHERE accepted) AS accepted, sum(chars) AS chars_accepted,
           count(*) FILTER (WHERE outcome = 'error') AS errors, {stages},
           sum(prompt_tokens) AS prompt_tokens, sum(cached_tokens) AS cached_tokens,
           ARRAY[{histogram}]::integer[] AS latency
    FROM keyed WHERE dimension = ANY({dimensions}) GROUP BY at, dimension, key"""


# The sums of cells (their latency histograms element by element): to read a period, and to make a day's cells.
SUMS = (", ".join(f"sum({c}) AS {c}" for c in _COUNTERS) + ", ARRAY["
        + ", ".join(f"sum(latency[{i + 1}])" for i in range(BUCKETS)) + "]::integer[] AS latency")

_ALL = "ARRAY['member', 'repository', 'language', 'door', 'source', 'error']"
_INSERT = f"INSERT INTO usage_hourly (hour, dimension, key, {', '.join(COLUMNS)}) "


def refresh(conn: Connection) -> datetime | None:
    """Roll up the hours closed since the last refresh and re-roll those whose completions got feedback since;
    returns the time before which every hour is rolled (None: nothing rolled yet). Run in the caller's transaction;
    when another refresh holds the lock, rolls nothing and returns what is rolled already."""
    rolled_until, feedback_seen = conn.execute(text(
        "SELECT rolled_until, feedback_seen FROM usage_rollup_state")).one()
    if not conn.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": _LOCK_KEY}).scalar_one():
        return rolled_until
    rolled_until, feedback_seen, now = conn.execute(text(
        "SELECT rolled_until, feedback_seen, now() FROM usage_rollup_state")).one()  # as of holding the lock
    horizon = conn.execute(text(f"SELECT date_bin('1 hour', CAST(:t AS timestamptz), {ORIGIN})"),
                           {"t": now - SETTLE}).scalar_one()
    stale: list[datetime] = []
    if rolled_until is not None and feedback_seen is not None:
        stale = [h for (h,) in conn.execute(text(
            f"SELECT DISTINCT date_bin('1 hour', e.created_at, {ORIGIN}) FROM completion_feedback f"
            " JOIN completion_events e ON e.request_id = f.completion_id"
            " WHERE f.created_at >= :since AND e.created_at < :rolled"),
            {"since": feedback_seen - SETTLE, "rolled": rolled_until})]
    if stale:
        conn.execute(text(f"DELETE FROM usage_hourly WHERE dimension = ANY({_ALL}) AND hour = ANY(:h)"),
                     {"h": stale})
        conn.execute(text(_INSERT + cells_sql(
            "(SELECT c.* FROM unnest(CAST(:h AS timestamptz[])) AS h(start)"
            " JOIN completion_events c ON c.created_at >= h.start AND c.created_at < h.start + interval '1 hour')",
            "interval '1 hour'", _ALL)), {"h": stale})
    low = rolled_until if rolled_until is not None else datetime.min.replace(tzinfo=horizon.tzinfo)
    if horizon > low:
        conn.execute(text(f"DELETE FROM usage_hourly WHERE dimension = ANY({_ALL}) AND hour >= :lo AND hour < :hi"),
                     {"lo": low, "hi": horizon})
        conn.execute(text(_INSERT + cells_sql(
            "(SELECT * FROM completion_events WHERE created_at >= :lo AND created_at < :hi)",
            "interval '1 hour'", _ALL)), {"lo": low, "hi": horizon})
        rolled_until = horizon
    _roll_days(conn, stale, low, horizon)
    conn.execute(text("UPDATE usage_rollup_state SET rolled_until = :r, feedback_seen = :f"),
                 {"r": rolled_until, "f": now})
    return rolled_until


def _roll_days(conn: Connection, stale: list[datetime], low: datetime, horizon: datetime) -> None:
    """(Re)make the daily cells of each whole day rolled by now whose hours were (re)rolled in this refresh."""
    days = [d for (d,) in conn.execute(text(
        f"SELECT DISTINCT date_bin('1 day', hour, {ORIGIN}) AS d FROM usage_hourly WHERE dimension = 'door'"
        f" AND (hour >= date_bin('1 day', CAST(:lo AS timestamptz), {ORIGIN}) OR hour = ANY(:stale))"
        " AND hour < :hi"), {"lo": max(low, horizon - timedelta(days=3660)), "stale": stale, "hi": horizon})
        if d + timedelta(days=1) <= horizon]
    if not days:
        return
    conn.execute(text(f"DELETE FROM usage_daily WHERE dimension = ANY({_ALL}) AND day = ANY(:d)"), {"d": days})
    conn.execute(text(
        f"INSERT INTO usage_daily (day, dimension, key, {', '.join(COLUMNS)})"
        f" SELECT d.day, c.dimension, c.key, {SUMS} FROM unnest(CAST(:d AS timestamptz[])) AS d(day)"
        " JOIN usage_hourly c ON c.dimension = ANY(" + _ALL + ") AND c.hour >= d.day"
        " AND c.hour < d.day + interval '1 day' GROUP BY d.day, c.dimension, c.key"), {"d": days})
