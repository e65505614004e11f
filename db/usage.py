"""What the telemetry tables say about use and quality over a period, grouped by member, repository, language or
editor door (the console's usage page and its CSV), and each member's last request.

A completion counts as shown once any feedback names it (an editor reports ``shown``, and an accepted or dismissed
suggestion was shown too); the acceptance rate is accepted / shown. The closed hours of a period come from the
hourly rollup (``db.usage_rollup``), the rest from the raw rows through their ``created_at`` index (migrations 2
and 9), never a scan of the whole table.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text

from db import usage_rollup as rollup
from db.session import engine_for

# The groupings a page may ask for (their SQL is db.usage_rollup's, never the caller's text).
DIMENSIONS = tuple(rollup.DIMENSIONS)

SUMMARY_FIELDS = ("requests", "shown", "accepted", "acceptance_rate", "chars_accepted", "p50_ms", "p95_ms",
                  "queue_ms", "context_ms", "prompt_ms", "decode_ms", "cache_hit_share", "errors")

_HOUR = timedelta(hours=1)
_DAY = timedelta(days=1)


def period_start(since: timedelta, now: datetime | None = None) -> datetime:
    return (now or datetime.now(UTC)) - since


def _ceil(at: datetime, step: timedelta) -> datetime:
    return datetime.fromtimestamp(math.ceil(at.timestamp() / step.total_seconds()) * step.total_seconds(), UTC)


def cells_query(bucket: timedelta, rolled_until: datetime | None, start: datetime) -> tuple[str, dict[str, Any]]:
    """The period's cells, as common table expressions: ``cells`` (for the groups, sources and errors: the whole
    rolled days from usage_daily, the other rolled hours from usage_hourly) and ``bars`` (editor doors per hour,
    for the chart), both with the rest of the period (its first partial hour, the hours not rolled yet) from the
    raw rows through their created_at index. Bars shorter than an hour read raw rows only (an hour's cell cannot be
    split)."""
    hourly = bucket % _HOUR == timedelta(0)
    first_hour = _ceil(start, _HOUR)
    use_rollup = hourly and rolled_until is not None and rolled_until > first_hour
    low, high = (first_hour, rolled_until) if use_rollup else (start, start)
    first_day, last_day = _ceil(low, _DAY), datetime.fromtimestamp(high.timestamp() // 86400 * 86400, UTC)
    if last_day <= first_day:
        first_day = last_day = high  # no whole day: every rolled hour from usage_hourly
    columns = ", ".join(rollup.COLUMNS)
    raw = rollup.cells_sql(
        "(SELECT * FROM completion_events WHERE created_at >= :start AND created_at < :low"
        " UNION ALL SELECT * FROM completion_events WHERE created_at >= :high)",
        "interval '1 hour'" if hourly else "CAST(:bucket AS interval)", "ARRAY[:by, 'door', 'source', 'error']")
    ctes = f"""raw AS MATERIALIZED ({raw}),
    cells AS MATERIALIZED (
        SELECT * FROM raw
        UNION ALL SELECT day, dimension, key, {columns} FROM usage_daily
          WHERE dimension = ANY(ARRAY[:by, 'source', 'error']) AND day >= :first_day AND day < :last_day
        UNION ALL SELECT hour, dimension, key, {columns} FROM usage_hourly
          WHERE dimension = ANY(ARRAY[:by, 'source', 'error'])
          AND (hour >= :low AND hour < :first_day OR hour >= :last_day AND hour < :high)),
    bars AS MATERIALIZED (
        SELECT * FROM raw WHERE dimension = 'door'
        UNION ALL SELECT hour, dimension, key, {columns} FROM usage_hourly
          WHERE dimension = 'door' AND hour >= :low AND hour < :high)"""
    return ctes, {"start": start, "low": low, "high": high, "first_day": first_day, "last_day": last_day}


def _derive(row: dict[str, Any]) -> dict[str, Any]:
    """A summary row's rates, averages and percentiles from its sums and latency histogram."""

    def ratio(a: Any, b: Any) -> float | None:
        return None if a is None or not b else float(a) / float(b)

    histogram = [int(n or 0) for n in row.pop("latency")]
    derived = {**row, "acceptance_rate": ratio(row["accepted"], row["shown"]),
               "p50_ms": rollup.percentile(histogram, 0.5), "p95_ms": rollup.percentile(histogram, 0.95),
               "cache_hit_share": ratio(row["cached_tokens"], row["prompt_tokens"])}
    for stage in ("queue", "context", "prompt", "decode"):
        derived[f"{stage}_ms"] = ratio(row[f"{stage}_ms"], row.pop(f"{stage}_n"))
    for name in ("requests", "shown", "accepted", "chars_accepted", "errors"):
        derived[name] = int(row[name] or 0)
    return derived


def usage(url: str, start: datetime, by: str, bucket: timedelta) -> dict[str, Any]:
    """The period's figures: ``total`` (one row), ``groups`` (one row per ``by`` value, busiest first), ``timeline``
    (per ``bucket``, on whole UTC hours: requests, shown, accepted, p95), ``errors`` (per code) and ``sources``
    (per context block kind: in how many shown and accepted suggestions it was). p50/p95 are read from the latency
    histogram (``db.usage_rollup.percentile``); everything else equals what the raw rows give."""
    if by not in DIMENSIONS:
        raise ValueError(f"group by one of {', '.join(DIMENSIONS)}")
    with engine_for(url).begin() as conn:
        rolled_until = rollup.refresh(conn)
    ctes, params = cells_query(bucket, rolled_until, start)
    # Every dimension splits the same completions: the bars add up the one with the fewest keys (editor doors).
    sql = f"""
    WITH {ctes}
    SELECT
      (SELECT coalesce(json_agg(g ORDER BY g.is_total DESC, g.requests DESC, g.key), '[]') FROM (
         SELECT key, GROUPING(key) AS is_total, {rollup.SUMS}
         FROM cells WHERE dimension = :by GROUP BY ROLLUP (key)) g) AS groups,
      (SELECT coalesce(json_agg(t ORDER BY t.at), '[]') FROM (
         SELECT date_bin(:bucket, at, {rollup.ORIGIN}) AS at, {rollup.SUMS} FROM bars GROUP BY 1) t) AS timeline,
      (SELECT coalesce(json_agg(x ORDER BY x.n DESC, x.code), '[]') FROM (
         SELECT key AS code, sum(requests) AS n FROM cells WHERE dimension = 'error' GROUP BY key) x) AS errors,
      (SELECT coalesce(json_agg(s ORDER BY s.accepted DESC, s.source), '[]') FROM (
         SELECT key AS source, sum(shown) AS shown, sum(accepted) AS accepted
         FROM cells WHERE dimension = 'source' GROUP BY key HAVING sum(shown) > 0) s) AS sources
    """
    with engine_for(url).connect() as conn:
        row = conn.execute(text(sql), {**params, "by": by, "bucket": bucket}).mappings().one()
    groups = [_derive(g) for g in row["groups"]]
    timeline = [{**_derive(t), "at": datetime.fromisoformat(t["at"])} for t in row["timeline"]]
    total = next((g for g in groups if g["is_total"]), None)
    return {"total": total, "groups": [g for g in groups if not g["is_total"]], "timeline": timeline,
            "errors": [{"code": e["code"], "n": int(e["n"])} for e in row["errors"]],
            "sources": [{"source": s["source"], "shown": int(s["shown"]), "accepted": int(s["accepted"])}
                        for s in row["sources"]]}


def last_seen(url: str, names: list[str]) -> dict[str, datetime]:
    """Each member's last request (one index probe per member on completion_events_user_created)."""
    if not names:
        return {}
    with engine_for(url).connect() as conn:
        rows = conn.execute(text(
            "SELECT n.name, (SELECT max(created_at) FROM completion_events e WHERE e.user_name = n.name)"
            " FROM unnest(CAST(:names AS text[])) AS n(name)"), {"names": names})
        return {name: at for name, at in rows if at is not None}


def repositories(url: str) -> list[dict[str, Any]]:
    """Each indexed repository: files and chunks of the shared index, head commit, when it was indexed, the newest
    indexed file (how fresh the index is)."""
    with engine_for(url).connect() as conn:
        return [dict(r) for r in conn.execute(text(
            "SELECT r.name, r.head_commit, r.indexed_at, r.embedder,"
            " (SELECT count(*) FROM indexed_files f WHERE f.repo_id = r.id AND f.owner = '' AND NOT f.deleted)"
            "   AS files,"
            " (SELECT coalesce(sum(chunk_count), 0) FROM indexed_files f WHERE f.repo_id = r.id AND f.owner = ''"
            "   AND NOT f.deleted) AS chunks,"
            " (SELECT max(indexed_at) FROM indexed_files f WHERE f.repo_id = r.id) AS last_file_at"
            " FROM repositories r ORDER BY r.name")).mappings()]


def repository_names(url: str) -> list[str]:
    with engine_for(url).connect() as conn:
        return [str(n) for (n,) in conn.execute(text("SELECT name FROM repositories ORDER BY name"))]
