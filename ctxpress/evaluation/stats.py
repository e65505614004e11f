"""``ctxpress stats``: what the telemetry table says about recent traffic."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from sqlalchemy import text

from db.session import engine_for

_SPAN = re.compile(r"^(\d+)\s*([smhd])$")


def parse_since(value: str) -> timedelta:
    match = _SPAN.match(value.strip())
    if not match:
        raise ValueError(f"--since wants a span like 30m, 1h, 7d; got {value!r}")
    amount, unit = int(match.group(1)), match.group(2)
    return timedelta(**{{"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[unit]: amount})


def collect(database_url: str, since: timedelta) -> dict[str, Any]:
    params = {"since": since}
    with engine_for(database_url).connect() as conn:
        by_scenario = conn.execute(text("""
            SELECT scenario, mode, count(*) AS requests,
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY total_ms) AS p50,
                   percentile_cont(0.95) WITHIN GROUP (ORDER BY total_ms) AS p95,
                   sum(cached_tokens)::float / nullif(sum(prompt_tokens), 0) AS cache_hit_rate,
                   avg(context_tokens) AS context_tokens, avg(file_tokens) AS file_tokens,
                   sum(draft_tokens_accepted)::float / nullif(sum(draft_tokens_proposed), 0) AS draft_acceptance
            FROM completion_events
            WHERE created_at > now() - :since AND outcome <> 'error'
            GROUP BY scenario, mode ORDER BY scenario, mode
        """), params).mappings().all()
        outcomes = conn.execute(text("""
            SELECT outcome, coalesce(error_code, degraded_reason, '') AS why, count(*) AS n
            FROM completion_events WHERE created_at > now() - :since
            GROUP BY 1, 2 ORDER BY 3 DESC
        """), params).mappings().all()
        feedback = conn.execute(text("""
            SELECT action, count(*) AS n, avg(chars_kept) AS chars_kept
            FROM completion_feedback WHERE created_at > now() - :since GROUP BY action
        """), params).mappings().all()
    counts = {row["action"]: row["n"] for row in feedback}
    decided = counts.get("accepted", 0) + counts.get("dismissed", 0)
    return {
        "scenarios": [dict(r) for r in by_scenario],
        "outcomes": [dict(r) for r in outcomes],
        "feedback": [dict(r) for r in feedback],
        "acceptance_rate": counts.get("accepted", 0) / decided if decided else None,
    }


def render(stats: dict[str, Any], since: str) -> str:
    def num(v: Any, fmt: str = ".0f") -> str:
        return "-" if v is None else format(float(v), fmt)

    lines = [f"completions in the last {since}",
             f"{'scenario':<14}{'mode':<11}{'requests':>9}{'p50 ms':>9}{'p95 ms':>9}{'cache hit':>10}"
             f"{'ctx tok':>9}{'file tok':>10}{'draft acc':>10}"]
    for r in stats["scenarios"]:
        lines.append(f"{r['scenario']:<14}{r['mode']:<11}{r['requests']:>9}{num(r['p50']):>9}{num(r['p95']):>9}"
                     f"{num(r['cache_hit_rate'], '.2f'):>10}{num(r['context_tokens']):>9}{num(r['file_tokens']):>10}"
                     f"{num(r['draft_acceptance'], '.2f'):>10}")
    lines.append("outcomes: " + (", ".join(f"{r['outcome']}{'/' + r['why'] if r['why'] else ''} {r['n']}"
                                           for r in stats["outcomes"]) or "none"))
    rate = stats["acceptance_rate"]
    lines.append("IDE feedback: " + (", ".join(f"{r['action']} {r['n']}" for r in stats["feedback"]) or "none")
                 + (f"; acceptance rate {rate:.1%}" if rate is not None else ""))
    return "\n".join(lines)
