"""What the telemetry tables say about use and quality over a period, grouped by member, repository, language or
editor door (the console's usage page and its CSV), and each member's last request.

A completion counts as shown once any feedback names it (an editor reports ``shown``, and an accepted or dismissed
suggestion was shown too); the acceptance rate is accepted / shown. Every query reads the period through the
``created_at`` indexes (migrations 2 and 9), never the whole table.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text

from db.session import engine_for

# The grouping a page may ask for, and its SQL expression: a fixed list, never the caller's text.
DIMENSIONS = {
    "member": "coalesce(e.user_name, '(single user)')",
    "repository": "e.repository",
    "language": "coalesce(e.language, '(unknown)')",
    "door": "e.scenario",
}

# The period's events joined with their feedback (one row per completion), shared by the queries below.
_PERIOD = """
WITH fb AS (
    SELECT completion_id,
           bool_or(action = 'accepted') AS accepted,
           coalesce(sum(chars_kept) FILTER (WHERE action = 'accepted'), 0) AS chars
    FROM completion_feedback WHERE created_at >= :start
    GROUP BY completion_id
), ev AS (
    SELECT e.*, fb.completion_id IS NOT NULL AS shown, coalesce(fb.accepted, false) AS accepted,
           coalesce(fb.chars, 0) AS chars
    FROM completion_events e LEFT JOIN fb ON fb.completion_id = e.request_id
    WHERE e.created_at >= :start
)
"""

_SUMMARY_COLUMNS = """
    count(*) AS requests,
    count(*) FILTER (WHERE shown) AS shown,
    count(*) FILTER (WHERE accepted) AS accepted,
    count(*) FILTER (WHERE accepted)::float / nullif(count(*) FILTER (WHERE shown), 0) AS acceptance_rate,
    sum(chars) AS chars_accepted,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY total_ms) FILTER (WHERE outcome <> 'error') AS p50_ms,
    percentile_cont(0.95) WITHIN GROUP (ORDER BY total_ms) FILTER (WHERE outcome <> 'error') AS p95_ms,
    avg(queue_ms) AS queue_ms, avg(context_ms) AS context_ms, avg(prompt_ms) AS prompt_ms,
    avg(decode_ms) AS decode_ms,
    sum(cached_tokens)::float / nullif(sum(prompt_tokens), 0) AS cache_hit_share,
    count(*) FILTER (WHERE outcome = 'error') AS errors
"""

SUMMARY_FIELDS = ("requests", "shown", "accepted", "acceptance_rate", "chars_accepted", "p50_ms", "p95_ms",
                  "queue_ms", "context_ms", "prompt_ms", "decode_ms", "cache_hit_share", "errors")


def period_start(since: timedelta, now: datetime | None = None) -> datetime:
    from datetime import UTC

    return (now or datetime.now(UTC)) - since


def usage(url: str, start: datetime, by: str, bucket: timedelta) -> dict[str, Any]:
    """The period's figures: ``total`` (one row), ``groups`` (one row per ``by`` value, busiest first), ``timeline``
    (per ``bucket``: requests, shown, accepted, p95), ``errors`` (per code) and ``sources`` (per context block kind:
    in how many shown and accepted suggestions it was)."""
    if by not in DIMENSIONS:
        raise ValueError(f"group by one of {', '.join(DIMENSIONS)}")
    params = {"start": start, "bucket": bucket}
    key = DIMENSIONS[by]
    # One statement: the period's join is computed once (MATERIALIZED) and each figure aggregates that result.
    sql = _PERIOD.replace("), ev AS (", "), ev AS MATERIALIZED (") + f"""
    SELECT
      (SELECT coalesce(json_agg(g ORDER BY g.is_total DESC, g.requests DESC), '[]') FROM (
         SELECT {key} AS key, GROUPING({key}) AS is_total, {_SUMMARY_COLUMNS}
         FROM ev e GROUP BY ROLLUP ({key})) g) AS groups,
      (SELECT coalesce(json_agg(t ORDER BY t.at), '[]') FROM (
         SELECT date_bin(:bucket, created_at, :start) AS at, count(*) AS requests,
                count(*) FILTER (WHERE shown) AS shown, count(*) FILTER (WHERE accepted) AS accepted,
                percentile_cont(0.95) WITHIN GROUP (ORDER BY total_ms) FILTER (WHERE outcome <> 'error') AS p95_ms
         FROM ev GROUP BY 1) t) AS timeline,
      (SELECT coalesce(json_agg(x ORDER BY x.n DESC), '[]') FROM (
         SELECT coalesce(error_code, '?') AS code, count(*) AS n FROM ev WHERE outcome = 'error' GROUP BY 1) x)
         AS errors,
      (SELECT coalesce(json_agg(s ORDER BY s.accepted DESC, s.source), '[]') FROM (
         SELECT source, count(*) AS shown, count(*) FILTER (WHERE accepted) AS accepted
         FROM ev, unnest(ev.sources) AS source WHERE shown GROUP BY source) s) AS sources
    """
    with engine_for(url).connect() as conn:
        conn.execute(text("SET LOCAL work_mem = '64MB'"))  # the period's sorts and hashes stay in memory
        row = conn.execute(text(sql), params).mappings().one()
    groups = row["groups"]
    timeline = [{**t, "at": datetime.fromisoformat(t["at"])} for t in row["timeline"]]
    total = next((g for g in groups if g["is_total"]), None)
    return {"total": total, "groups": [g for g in groups if not g["is_total"]], "timeline": timeline,
            "errors": row["errors"], "sources": row["sources"]}


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
