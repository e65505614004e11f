"""What ``ctxpress bench`` prints: each scenario's samples summarised per label, as a table and one JSON line."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ctxpress.evaluation.runner import percentile


@dataclass
class Sample:
    """One request of a scenario: its label (a mode, a layout), latency, reply and whether the suggestion matched."""

    mode: str
    latency_ms: float
    reply: dict[str, Any]
    matched: bool | None = None


def summarise(samples: Sequence[Sample], seconds: float | None = None) -> dict[str, Any]:
    """``seconds``: the wall time the samples shared (concurrent clients); without it, throughput
    is requests per second of this mode's own serving time (sequential scenarios)."""
    ok = [s for s in samples if "error" not in s.reply]
    out: dict[str, Any] = {"requests": len(samples), "errors": len(samples) - len(ok)}
    lat = [s.latency_ms for s in ok]
    out["latency_ms_p50"] = percentile(lat, 50) if lat else None
    out["latency_ms_p95"] = percentile(lat, 95) if lat else None
    out["latency_ms_mean"] = statistics.fmean(lat) if lat else None
    out["latency_ms_first"] = lat[0] if lat else None  # a replay's first request: what a cold start costs
    out["prompt_tokens_first"] = ok[0].reply.get("context", {}).get("prompt_tokens") if ok else None
    busy = seconds if seconds is not None else sum(lat) / 1000
    out["throughput_rps"] = len(ok) / busy if busy else None
    prompt = sum(s.reply["context"].get("prompt_tokens") or 0 for s in ok)
    cached = sum(s.reply["context"].get("cached_tokens") or 0 for s in ok)
    out["cache_hit_rate"] = cached / prompt if prompt else 0.0
    out["restored_tokens_mean"] = statistics.fmean(
        s.reply["context"].get("restored_tokens") or 0 for s in ok) if ok else None
    out["prompt_tokens_mean"] = statistics.fmean(s.reply["context"].get("prompt_tokens") or 0 for s in ok) if ok \
        else None
    # prompt tokens the engine had to process (not found in its KV cache), per request
    out["processed_tokens_mean"] = statistics.fmean(
        (s.reply["context"].get("prompt_tokens") or 0) - (s.reply["context"].get("cached_tokens") or 0)
        for s in ok) if ok else None
    # the latency plan (workers/completion/prompt_plan.py): how many prompts were planned smaller, and to what
    plans = [s.reply["context"].get("plan") for s in ok]
    planned = [p["budget_tokens"] for p in plans if p]
    out["planned_share"] = len(planned) / len(ok) if ok else None
    out["planned_budget_p50"] = percentile(planned, 50) if planned else None
    out["context_tokens_p50"] = percentile([s.reply["context"].get("context_tokens") or 0 for s in ok], 50) \
        if ok else None
    proposed = sum(s.reply.get("draft_tokens_proposed") or 0 for s in ok)
    accepted = sum(s.reply.get("draft_tokens_accepted") or 0 for s in ok)
    # share of proposed draft tokens the target accepted; None while no request drafted
    out["draft_acceptance"] = accepted / proposed if proposed else None
    out["draft_accepted_per_request"] = accepted / len(ok) if ok else None
    matched = [s.matched for s in samples if s.matched is not None]
    if matched:
        out["suggestion_match_rate"] = sum(matched) / len(matched)
    # what the way to the appliance added (NATS hops, encoding): the client's latency less the worker's own total
    added = [s.latency_ms - s.reply["timings"]["total_ms"] for s in ok
             if (s.reply.get("timings") or {}).get("total_ms") is not None]
    out["client_added_ms_p50"] = percentile(added, 50) if added else None
    out["client_added_ms_p95"] = percentile(added, 95) if added else None
    return out


def report_lines(results: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    keys = ("requests", "errors", "latency_ms_p50", "latency_ms_p95", "latency_ms_mean", "latency_ms_first",
            "throughput_rps", "cache_hit_rate", "restored_tokens_mean", "vs_warm", "prompt_tokens_mean",
            "processed_tokens_mean", "planned_share", "planned_budget_p50", "context_tokens_p50", "draft_acceptance",
            "draft_accepted_per_request", "suggestion_match_rate", "forward_cache_share",
            "forward_cache_within_5ms_share", "client_added_ms_p50", "client_added_ms_p95", "editor_added_ms_p50",
            "editor_added_ms_p95", "editor_over_nats_ms_p50", "bridge_added_ms_p50",
            "bridge_added_ms_p95",
            "keystrokes", "requests_sent", "answers_shown", "engine_ms", "engine_ms_on_shown",
            "superseded_share", "accepts", "within_50ms", "share_within_50ms")
    lines = []
    for name, modes in results.items():
        lines.append(f"[{name}]" + "".join(f"{m:>14}" for m in modes))
        for key in keys:
            values = [modes[m].get(key) for m in modes]
            if all(v is None for v in values):
                continue
            lines.append(f"  {key:<24}" + "".join(f"{'-' if v is None else format(v, '.3f'):>14}" for v in values))
    return lines


def final_line(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    return json.dumps({"scenarios": results})
