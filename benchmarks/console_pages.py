"""The team console's pages under a team's load: ``python -m benchmarks.console_pages``.

Starts an embedded PostgreSQL of its own (a temporary directory), seeds ``--members`` members with grants and
``--events`` completion events spread over ``--days`` days (with shown/accepted/dismissed feedback for most of
them, errors, several languages and editor doors), signs in to the console served in-process on a real socket, and
asks each page ``--rounds`` times. Prints progress, p50/p95 per page, the plan of the usage query (whether it reads
the telemetry table through its indexes), and one JSON line. Exit 1 when a page's p95 is over ``--budget-ms``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import text

PAGES = ("/", "/members", "/repositories", "/usage", "/usage?period=24h&by=door", "/usage?period=30d&by=language",
         "/usage?period=30d&by=member", "/usage.csv?period=7d&by=repository", "/audit")
PASSWORD = "benchmark passphrase"


def seed(url: str, members: int, events: int, days: int) -> None:
    from ctxpress_core import identity
    from db import team as store
    from db.console import add_admin, audit
    from db.session import engine_for

    hashed = identity.bcrypt_hash("unused", 4)
    repos = [f"repo-{i}" for i in range(8)]
    for i in range(members):
        store.add_user(url, f"member-{i:02d}", hashed, repos[i % 8: i % 8 + 2])
        audit(url, "lead", "add developer", f"member-{i:02d}", "", "cli")
    from ctxpress.console.auth import hash_password

    add_admin(url, "lead", hash_password(PASSWORD))
    with engine_for(url).begin() as conn:
        conn.execute(text(f"""
            INSERT INTO completion_events (created_at, request_id, repository, path, language, mode, scenario, model,
                outcome, error_code, strategy, sources, file_tokens, context_tokens, prompt_tokens, cached_tokens,
                completion_tokens, queue_ms, context_ms, prompt_ms, decode_ms, total_ms, user_name)
            SELECT now() - random() * interval '{days} days', 'req-' || g, 'repo-' || (g % 8), 'src/f' || (g % 500),
                (ARRAY['python','typescript','go','rust'])[1 + g % 4], 'optimized',
                (ARRAY['lsp','infill','tabby','fim'])[1 + g % 4], 'qwen',
                CASE WHEN g % 50 = 0 THEN 'error' ELSE 'ok' END,
                CASE WHEN g % 50 = 0 THEN (ARRAY['inference_timeout','forbidden'])[1 + g % 2] END, 'ast',
                CASE g % 3 WHEN 0 THEN ARRAY['enclosing','window']
                           WHEN 1 THEN ARRAY['class_header','enclosing','retrieval'] ELSE ARRAY['file'] END,
                2000, 900, 950, (g % 900), 12, random() * 4, 3 + random() * 10, 40 + random() * 200,
                30 + random() * 150, 80 + random() * 400, 'member-' || lpad((g % {members})::text, 2, '0')
            FROM generate_series(1, {events}) AS g"""))
        # about 70 % shown, a third of those accepted, feedback a few seconds after its request
        conn.execute(text("""
            INSERT INTO completion_feedback (created_at, completion_id, action, chars_kept, user_name)
            SELECT e.created_at + interval '2 seconds', e.request_id, a.action,
                   CASE WHEN a.action = 'accepted' THEN 20 + (e.id % 60)::int END, e.user_name
            FROM completion_events e
            CROSS JOIN LATERAL (SELECT 'shown' AS action UNION ALL
                                SELECT CASE WHEN e.id % 3 = 0 THEN 'accepted' ELSE 'dismissed' END) a
            WHERE e.outcome = 'ok' AND e.id % 10 < 7"""))
        conn.execute(text("ANALYZE completion_events"))
        conn.execute(text("ANALYZE completion_feedback"))


def roll_up(url: str) -> float:
    """The first rollup of every closed hour (what the first usage page after an upgrade pays once); seconds."""
    from db import usage_rollup
    from db.session import engine_for

    started = time.perf_counter()
    with engine_for(url).begin() as conn:
        usage_rollup.refresh(conn)
    return time.perf_counter() - started


def usage_plan(url: str) -> list[str]:
    """EXPLAIN of the usage page's cells (30 days, by language): the rolled hours and the raw rows around them."""
    from db import usage
    from db.session import engine_for

    with engine_for(url).begin() as conn:
        rolled_until = conn.execute(text("SELECT rolled_until FROM usage_rollup_state")).scalar_one()
        ctes, params = usage.cells_query(timedelta(days=1), rolled_until, usage.period_start(timedelta(days=30)))
        return [row[0] for row in conn.execute(text(f"EXPLAIN WITH {ctes} SELECT (SELECT count(*) FROM cells),"
                                                    " (SELECT count(*) FROM bars)"),
                                               {**params, "by": "language", "bucket": timedelta(days=1)})]


async def _measure(settings: object, rounds: int) -> dict[str, list[float]]:
    from aiohttp import ClientSession, CookieJar, web

    from ctxpress.console.app import make_app

    app = make_app(settings, status_interval_s=30)  # type: ignore[arg-type]
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}"
    timings: dict[str, list[float]] = {page: [] for page in PAGES}
    try:
        async with ClientSession(cookie_jar=CookieJar(unsafe=True)) as http:  # an IP host
            async with http.post(f"{base}/login", data={"name": "lead", "password": PASSWORD},
                                 allow_redirects=False) as signed_in:
                assert signed_in.status == 303, await signed_in.text()
            for page in PAGES:  # once each, unmeasured: the first snapshot, cold caches
                async with http.get(base + page, allow_redirects=False) as response:
                    body = await response.text()
                    if response.status != 200:
                        raise SystemExit(f"{page}: HTTP {response.status}: {body[:300]}")
            for n in range(rounds):
                for page in PAGES:
                    started = time.perf_counter()
                    async with http.get(base + page, allow_redirects=False) as response:
                        await response.read()
                        assert response.status == 200, f"{page}: HTTP {response.status}"
                    timings[page].append((time.perf_counter() - started) * 1000)
                print(f"  round {n + 1}/{rounds}", file=sys.stderr)
    finally:
        await runner.cleanup()
    return timings


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=30, help="the seeded events' span")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--budget-ms", type=float, default=200.0)
    args = parser.parse_args(argv)

    from ctxpress.topology import free_ports
    from ctxpress_core.settings import Settings
    from db.embedded import EmbeddedPostgres
    from db.migrations import migrate

    with tempfile.TemporaryDirectory(prefix="ctxpress-console-bench-") as tmp:
        (port,) = free_ports(1)
        server = EmbeddedPostgres(Path(tmp) / "pg", "127.0.0.1", port)
        print("starting an embedded PostgreSQL…", file=sys.stderr)
        server.start(timeout_s=120)
        try:
            url = server.url()
            migrate(url)
            started = time.perf_counter()
            print(f"seeding {args.members} members and {args.events:,} completion events over {args.days} days…",
                  file=sys.stderr)
            seed(url, args.members, args.events, args.days)
            print(f"  seeded in {time.perf_counter() - started:.1f}s", file=sys.stderr)
            rolled_s = roll_up(url)
            print(f"  first rollup of the closed hours: {rolled_s:.1f}s (once; then each refresh rolls the hours"
                  " closed since)", file=sys.stderr)
            plan = usage_plan(url)
            settings = Settings(home=Path(tmp) / "home", team=True, database_url=url, worker_metrics_port=0)
            print(f"asking each of {len(PAGES)} pages {args.rounds} times…", file=sys.stderr)
            timings = asyncio.run(_measure(settings, args.rounds))
        finally:
            server.stop()
    rows = {page: {"p50_ms": round(statistics.median(v), 1), "p95_ms": round(p95(v), 1)} for page, v in timings.items()}
    print(f"\n{'page':<40}{'p50 ms':>9}{'p95 ms':>9}")
    for page, row in rows.items():
        print(f"{page:<40}{row['p50_ms']:>9.1f}{row['p95_ms']:>9.1f}")
    scanned = r"Seq Scan on (completion_(events|feedback)|usage_(hourly|daily))"
    scans = [line.strip() for line in plan if re.search(scanned, line)]
    print("usage cells (30 days) read the telemetry through: "
          + ", ".join(sorted({m.group(0) for line in plan if (m := re.search(r"(Bitmap )?Index( Only)? Scan"
                                                                           r" (using|on) \w+", line))}))
          + ("; SEQUENTIAL SCANS: " + "; ".join(scans) if scans else "; no sequential scan of the telemetry tables"))
    worst = max(row["p95_ms"] for row in rows.values())
    verdict = "within" if worst <= args.budget_ms else "OVER"
    print(f"worst p95 {worst:.1f} ms: {verdict} the {args.budget_ms:.0f} ms budget "
          f"({args.members} members, {args.events:,} events over {args.days} days)")
    print(json.dumps({"benchmark": "console_pages", "members": args.members, "events": args.events,
                      "days": args.days, "rounds": args.rounds, "pages": rows, "seq_scans": scans,
                      "first_rollup_s": round(rolled_s, 2),
                      "worst_p95_ms": worst}))
    return 0 if worst <= args.budget_ms else 1


if __name__ == "__main__":
    raise SystemExit(main())
