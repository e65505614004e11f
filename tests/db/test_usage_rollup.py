"""The usage pages' figures through the hourly rollup equal what the raw telemetry rows give (a real PostgreSQL):
counts, characters, errors, sources and stage averages exactly; p50/p95 in the bucket of the exact value. Late
feedback re-rolls its hour; rolling again changes nothing."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from db import usage
from db.session import engine_for
from db.usage_rollup import bucket_of, bucket_range, refresh
from tests.team_services import embedded_postgres

pytestmark = pytest.mark.services

NOW = datetime.now(UTC)
START = NOW - timedelta(hours=72)  # two whole UTC days at least, read from usage_daily
KEYS = {"member": lambda e: e["user_name"] or "(single user)", "repository": lambda e: e["repository"],
        "language": lambda e: e["language"] or "(unknown)", "door": lambda e: e["scenario"]}


def seeded_events(rng: random.Random) -> list[dict[str, Any]]:
    """80 hours of completions, some in the open hour; errors, unknown languages, the single user, missing
    timings, latencies in the histogram's open bucket."""
    events = []
    ages = [rng.uniform(0, 80 * 3600) for _ in range(1500)] + [rng.uniform(0, 120) for _ in range(30)]
    for i, age in enumerate(ages):
        error = i % 17 == 0
        events.append({
            "created_at": NOW - timedelta(seconds=age), "request_id": f"r{i}",
            "repository": f"repo-{i % 3}", "path": "a.py", "language": rng.choice(["python", "go", None]),
            "mode": "optimized", "scenario": rng.choice(["lsp", "fim"]),
            "outcome": "error" if error else rng.choice(["ok", "ok", "degraded"]),
            "error_code": rng.choice(["inference_timeout", None]) if error else None,
            "sources": rng.choice([["enclosing", "window"], ["retrieval"], [], ["enclosing", "enclosing"]]),
            "prompt_tokens": rng.choice([None, rng.randint(100, 900)]), "cached_tokens": rng.randint(0, 100),
            "queue_ms": rng.choice([None, rng.uniform(0, 5)]), "context_ms": rng.uniform(1, 20),
            "prompt_ms": rng.uniform(10, 300), "decode_ms": rng.choice([None, rng.uniform(10, 200)]),
            "total_ms": rng.choice([None, rng.lognormvariate(5.5, 0.8), 70000.0 + i]),
            "user_name": rng.choice(["ann", "bob", None]),
        })
    return events


def seeded_feedback(rng: random.Random, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    feedback = []
    for e in events:
        if e["outcome"] == "error" or rng.random() < 0.3:
            continue
        at = e["created_at"] + timedelta(seconds=2)
        if rng.random() < 0.8:
            feedback.append({"created_at": at, "completion_id": e["request_id"], "action": "shown", "chars_kept": None})
        action = rng.choice(["accepted", "dismissed"])
        kept = rng.randint(1, 80) if action == "accepted" else None
        feedback.append({"created_at": at, "completion_id": e["request_id"], "action": action, "chars_kept": kept})
    return feedback


def insert(url: str, events: list[dict[str, Any]], feedback: list[dict[str, Any]]) -> None:
    with engine_for(url).begin() as conn:
        if events:
            columns = list(events[0])
            conn.execute(text(f"INSERT INTO completion_events ({', '.join(columns)})"
                              f" VALUES ({', '.join(':' + c for c in columns)})"), events)
        if feedback:
            conn.execute(text("INSERT INTO completion_feedback (created_at, completion_id, action, chars_kept)"
                              " VALUES (:created_at, :completion_id, :action, :chars_kept)"), feedback)


def expected(events: list[dict[str, Any]], feedback: list[dict[str, Any]], key: Any) -> dict[str, dict[str, Any]]:
    """The figures straight from the rows, per key (and "" for the total)."""
    by_completion: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in feedback:
        by_completion[f["completion_id"]].append(f)
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["created_at"] >= START:
            rows[key(e)].append(e)
            rows[""].append(e)
    found = {}
    for name, group in rows.items():
        fb = [by_completion[e["request_id"]] for e in group]
        latencies = [e["total_ms"] for e in group if e["outcome"] != "error" and e["total_ms"] is not None]
        found[name] = {
            "requests": len(group), "shown": sum(1 for f in fb if f),
            "accepted": sum(1 for f in fb if any(x["action"] == "accepted" for x in f)),
            "chars_accepted": sum(x["chars_kept"] for f in fb for x in f if x["action"] == "accepted"),
            "errors": sum(1 for e in group if e["outcome"] == "error"),
            "queue_ms": mean([e["queue_ms"] for e in group]), "decode_ms": mean([e["decode_ms"] for e in group]),
            "cache_hit_share": sum(e["cached_tokens"] for e in group)
            / sum(e["prompt_tokens"] for e in group if e["prompt_tokens"] is not None)
            if any(e["prompt_tokens"] is not None for e in group) else None,
            "p50": disc(latencies, 0.5), "p95": disc(latencies, 0.95)}
    return found


def mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def disc(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def check(figures: dict[str, Any], want: dict[str, dict[str, Any]]) -> None:
    rows = {g["key"]: g for g in figures["groups"]} | {"": figures["total"]}
    assert set(rows) == set(want)
    for name, row in rows.items():
        w = want[name]
        for field in ("requests", "shown", "accepted", "chars_accepted", "errors"):
            assert row[field] == w[field], (name, field)
        for field in ("queue_ms", "decode_ms", "cache_hit_share"):
            assert row[field] == pytest.approx(w[field], rel=1e-5), (name, field)
        assert row["acceptance_rate"] == pytest.approx(w["accepted"] / w["shown"])
        for q in ("p50", "p95"):
            low, high = bucket_range(bucket_of(w[q]))
            assert low <= row[f"{q}_ms"] <= high, (name, q, w[q], row[f"{q}_ms"])


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[Any], list[Any]]]:
    rng = random.Random(44)
    events = seeded_events(rng)
    feedback = seeded_feedback(rng, events)
    with embedded_postgres(tmp_path_factory.mktemp("usage") / "pg") as url:
        insert(url, events, feedback)
        yield url, events, feedback


@pytest.mark.parametrize("by", list(usage.DIMENSIONS))
def test_rolled_up_figures_equal_the_raw_rows(seeded: tuple[str, list[Any], list[Any]], by: str) -> None:
    url, events, feedback = seeded
    figures = usage.usage(url, START, by, timedelta(hours=1))
    with engine_for(url).connect() as conn:
        rolled_until = conn.execute(text("SELECT rolled_until FROM usage_rollup_state")).scalar_one()
        days = conn.execute(text("SELECT count(DISTINCT day) FROM usage_daily WHERE day >= :s"),
                            {"s": START}).scalar_one()
    assert rolled_until > NOW - timedelta(hours=2)  # the period is read mostly from the rollup
    assert days >= 2
    check(figures, expected(events, feedback, KEYS[by]))
    # the same period from the raw rows alone (bars shorter than an hour cannot use the rollup): the same figures
    raw = usage.usage(url, START, by, timedelta(minutes=30))
    assert raw["total"] == figures["total"]
    assert raw["groups"] == figures["groups"]
    assert raw["errors"] == figures["errors"]
    assert raw["sources"] == figures["sources"]


def test_sources_errors_and_timeline(seeded: tuple[str, list[Any], list[Any]]) -> None:
    url, events, feedback = seeded
    figures = usage.usage(url, START, "door", timedelta(hours=6))
    decided = {f["completion_id"] for f in feedback}
    accepted = {f["completion_id"] for f in feedback if f["action"] == "accepted"}
    period = [e for e in events if e["created_at"] >= START]
    sources: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in period:
        for s in e["sources"]:
            if e["request_id"] in decided:
                sources[s][0] += 1
                sources[s][1] += e["request_id"] in accepted
    assert {s["source"]: [s["shown"], s["accepted"]] for s in figures["sources"]} == dict(sources)
    errors: dict[str, int] = defaultdict(int)
    for e in period:
        if e["outcome"] == "error":
            errors[e["error_code"] or "?"] += 1
    assert {e["code"]: e["n"] for e in figures["errors"]} == dict(errors)
    assert sum(t["requests"] for t in figures["timeline"]) == len(period)
    assert all(t["at"].hour % 6 == 0 and t["at"].minute == 0 for t in figures["timeline"])  # whole UTC bars


def test_late_feedback_re_rolls_its_hour_and_rolling_again_changes_nothing(
        seeded: tuple[str, list[Any], list[Any]]) -> None:
    url, events, feedback = seeded
    usage.usage(url, START, "member", timedelta(hours=1))
    decided = {f["completion_id"] for f in feedback}
    old = next(e for e in events if START + timedelta(hours=1) < e["created_at"] < NOW - timedelta(hours=50)
               and e["outcome"] != "error" and e["request_id"] not in decided)
    late = [{"created_at": datetime.now(UTC), "completion_id": old["request_id"], "action": "accepted",
             "chars_kept": 33}]
    insert(url, [], late)
    feedback.extend(late)  # the module's other tests see the same rows as the database
    check(usage.usage(url, START, "member", timedelta(hours=1)), expected(events, feedback, KEYS["member"]))
    with engine_for(url).begin() as conn:
        before = [conn.execute(text(f"SELECT count(*), sum(requests) FROM usage_{span}")).one()
                  for span in ("hourly", "daily")]
        # as if the state had been lost: every hour is rolled again, nothing counted twice
        conn.execute(text("UPDATE usage_rollup_state SET rolled_until = NULL, feedback_seen = NULL"))
        refresh(conn)
        assert [conn.execute(text(f"SELECT count(*), sum(requests) FROM usage_{span}")).one()
                for span in ("hourly", "daily")] == before
    check(usage.usage(url, START, "member", timedelta(hours=1)), expected(events, feedback, KEYS["member"]))
