"""`ctxpress eval`, telemetry, `ctxpress stats`, feedback and /metrics through the real services."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from db.session import engine_for

pytestmark = pytest.mark.services

LIB = '''def clamp(value, low, high):
    """Keep value between low and high."""
    if value < low:
        return low
    if value > high:
        return high
    return value


def average(values):
    total = sum(values)
    return total / len(values)
'''

FINAL_KEYS = {"exact_match", "edit_similarity", "identifier_match", "latency_ms_p50", "latency_ms_p95",
              "prompt_tokens_mean", "file_tokens_mean", "compression_ratio"}


@pytest.fixture(scope="module")
def tiny_cases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("tiny-repo")
    (repo / "lib.py").write_text(LIB)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    lines = LIB.splitlines()
    cases = []
    for number, prefix in [(5, "        return "), (10, "    total = ")]:
        assert lines[number].startswith(prefix)
        cases.append({"id": f"lib.py:{number}", "repo": str(repo), "path": "lib.py", "line": number,
                      "column": len(prefix), "expected": lines[number][len(prefix):]})
    path = repo.parent / f"{repo.name}-cases.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    return path


def test_eval_both_modes_end_to_end(appliance: Any, tiny_cases: Path, tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    run = appliance.ctxpress("eval", "--cases", str(tiny_cases), "--mode", "both", "--out", str(out),
                             "--max-tokens", "12")
    assert run.returncode == 0, run.stderr
    final = json.loads(run.stdout.strip().splitlines()[-1])
    assert final["n"] == 2
    for mode in ("baseline", "optimized"):
        assert FINAL_KEYS <= set(final[mode]), set(final[mode])
        assert final[mode]["errors"] == 0
        assert 0 <= final[mode]["exact_match"] <= 1
        assert final[mode]["latency_ms_p95"] >= final[mode]["latency_ms_p50"] > 0
    assert {"latency_ms_p50", "latency_ms_p95", "exact_match", "edit_similarity"} <= set(final["ratio"])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["mode"] for r in rows] == ["baseline", "optimized", "optimized", "baseline"]  # A B, B A
    assert "eval [" in run.stderr  # the progress bar


def test_quality_gate_exit_status(appliance: Any, tiny_cases: Path) -> None:
    # The drop in points is at least -100, so -101 must fail and 101 must pass, whatever the model says.
    failing = appliance.ctxpress("eval", "--cases", str(tiny_cases), "--limit", "1", "--gate", "-101",
                                 "--max-tokens", "8")
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "FAIL" in failing.stdout
    passing = appliance.ctxpress("eval", "--cases", str(tiny_cases), "--limit", "1", "--gate", "101",
                                 "--max-tokens", "8")
    assert passing.returncode == 0
    assert json.loads(passing.stdout.splitlines()[-1])["gate"]["passed"] is True


def test_ablation_features_are_sent_and_unknown_ones_refused(appliance: Any, tiny_cases: Path,
                                                              tmp_path: Path) -> None:
    bad = appliance.ctxpress("eval", "--cases", str(tiny_cases), "--features=-teleport")
    assert bad.returncode == 2 and "unknown feature" in bad.stderr
    out = tmp_path / "rows.jsonl"
    run = appliance.ctxpress("eval", "--cases", str(tiny_cases), "--limit", "1", "--mode", "optimized",
                             "--features", "crop=off", "--out", str(out), "--max-tokens", "8")
    assert run.returncode == 0, run.stderr
    row = json.loads(out.read_text().splitlines()[0])
    assert row["strategy"] == "window"  # cropping switched off: the window is used


async def test_telemetry_rows_stats_and_feedback(appliance: Any, nats_client: Any) -> None:
    request_id = f"telemetry-{time.time_ns()}"
    request = {"repository": "t", "path": "t.py", "text": "def f(x):\n    return x + ", "line": 1, "column": 15,
               "max_tokens": 4, "request_id": request_id, "scenario": "test-scenario"}
    reply = json.loads((await nats_client.request(appliance.settings.completion_subject,
                                                  json.dumps(request).encode(), timeout=120)).data)
    assert reply["id"] == request_id
    bad = {**request, "line": 40, "request_id": request_id + "-bad"}
    await nats_client.request(appliance.settings.completion_subject, json.dumps(bad).encode(), timeout=10)
    fb = await nats_client.request(appliance.settings.feedback_subject, json.dumps(
        {"completion_id": request_id, "action": "accepted", "chars_kept": 5}).encode(), timeout=10)
    assert json.loads(fb.data) == {"ok": True}

    url = appliance.settings.effective_database_url()
    deadline = time.monotonic() + 10
    rows: list[Any] = []
    while time.monotonic() < deadline and len(rows) < 2:
        with engine_for(url).connect() as conn:
            rows = conn.execute(text(
                "SELECT request_id, outcome, error_code, scenario, prompt_tokens, context_tokens, total_ms "
                "FROM completion_events WHERE request_id LIKE :rid ORDER BY request_id"),
                {"rid": request_id + "%"}).all()
        await asyncio.sleep(0.2)
    assert len(rows) == 2, rows
    ok, err = rows
    assert ok.outcome in {"ok", "degraded"} and ok.scenario == "test-scenario"
    assert ok.prompt_tokens > ok.context_tokens > 0 and ok.total_ms > 0
    assert err.outcome == "error" and err.error_code == "cursor_out_of_range"

    stats = appliance.ctxpress("stats", "--since", "1h", "--json")
    assert stats.returncode == 0, stats.stderr
    summary = json.loads(stats.stdout)
    scenarios = {(r["scenario"], r["mode"]): r for r in summary["scenarios"]}
    assert scenarios[("test-scenario", "optimized")]["requests"] >= 1
    assert any(r["outcome"] == "error" and r["why"] == "cursor_out_of_range" for r in summary["outcomes"])
    deadline = time.monotonic() + 10
    while summary["acceptance_rate"] is None and time.monotonic() < deadline:
        await asyncio.sleep(0.3)
        summary = json.loads(appliance.ctxpress("stats", "--json").stdout)
    assert summary["acceptance_rate"] == 1.0
    human = appliance.ctxpress("stats")
    assert "test-scenario" in human.stdout and "IDE feedback" in human.stdout


async def test_worker_metrics_endpoint(appliance: Any, nats_client: Any) -> None:
    request = {"repository": "m", "path": "m.py", "text": "x = 1\ny = x + ", "line": 1, "column": 8,
               "max_tokens": 3}
    await nats_client.request(appliance.settings.completion_subject, json.dumps(request).encode(), timeout=120)
    port = appliance.settings.worker_metrics_port
    body = await asyncio.to_thread(
        lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())
    for name in ("ctxpress_requests_total", "ctxpress_request_latency_seconds_bucket", "ctxpress_prompt_tokens_total",
                 "ctxpress_cached_prompt_tokens_total", "ctxpress_stage_latency_seconds_bucket",
                 "ctxpress_context_tokens_total", "ctxpress_draft_tokens_proposed_total"):
        assert name in body, name
    assert 'ctxpress_requests_total{mode="optimized",outcome=' in body
