"""``ctxpress eval``: quality and latency of baseline and optimized, on the real path.

Every case is sent over NATS to the completion worker exactly as an IDE would send it.
With ``--mode both`` the two modes alternate case by case (A B, B A, ...) so that the
machine's drift and the engine's cache state hit both alike.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxpress.client import CompletionClient
from ctxpress.evaluation.cases import Case, cut_out, iter_case_files
from ctxpress.evaluation.progress import Progress
from ctxpress.evaluation.scoring import score
from ctxpress_core.wire.v1 import CompletionRequest, FileOpened

QUALITY_KEYS = ("exact_match", "edit_similarity", "identifier_match", "identifier_f1")


@dataclass
class EvalConfig:
    nats_url: str
    subject: str
    modes: Sequence[str]
    features: dict[str, bool] | None = None
    max_tokens: int = 24
    budget_tokens: int | None = None
    timeout_s: float = 300.0


def percentile(values: Sequence[float], pct: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = pct / 100 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    ok = [r for r in rows if not r.get("error")]
    out: dict[str, float] = {"n": len(rows), "errors": len(rows) - len(ok)}
    if not ok:
        return out
    for key in QUALITY_KEYS:
        out[key] = statistics.fmean(r[key] for r in ok)
    latencies = [r["latency_ms"] for r in ok]
    out["latency_ms_p50"] = percentile(latencies, 50)
    out["latency_ms_p95"] = percentile(latencies, 95)
    out["latency_ms_mean"] = statistics.fmean(latencies)
    out["prompt_tokens_mean"] = statistics.fmean(r["prompt_tokens"] or 0 for r in ok)
    out["context_tokens_mean"] = statistics.fmean(r["context_tokens"] for r in ok)
    out["file_tokens_mean"] = statistics.fmean(r["file_tokens"] for r in ok)
    out["compression_ratio"] = out["file_tokens_mean"] / out["context_tokens_mean"] if out["context_tokens_mean"] else 0
    cached = sum(r["cached_tokens"] or 0 for r in ok)
    prompt = sum(r["prompt_tokens"] or 0 for r in ok)
    out["cache_hit_rate"] = cached / prompt if prompt else 0.0
    out["degraded"] = sum(1 for r in ok if r.get("degraded"))
    return out


def ratios(baseline: dict[str, float], optimized: dict[str, float]) -> dict[str, float]:
    """Latency and size as optimized/baseline; quality as the difference in points
    (optimized - baseline, x100), under the same metric names."""
    out: dict[str, float] = {}
    for key in ("latency_ms_p50", "latency_ms_p95", "latency_ms_mean", "prompt_tokens_mean", "context_tokens_mean"):
        if baseline.get(key):
            out[key] = optimized.get(key, 0.0) / baseline[key]
    for key in QUALITY_KEYS:
        if key in baseline and key in optimized:
            out[key] = (optimized[key] - baseline[key]) * 100
    return out


def _order(index: int, modes: Sequence[str]) -> Sequence[str]:
    # A B, B A, A B...: each mode goes first half the time, so neither always finds a warm cache.
    return modes if index % 2 == 0 else list(reversed(modes))


async def run_eval(cases: Sequence[Case], config: EvalConfig, out: Path | None = None,
                   on_row: Callable[[dict[str, Any]], None] | None = None) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = {mode: [] for mode in config.modes}
    progress = Progress(len(cases) * len(config.modes), "eval")
    sink = out.open("w", encoding="utf-8") if out else None
    try:
        async with CompletionClient(config.nats_url, config.subject, timeout_s=config.timeout_s) as client:
            opened: set[str] = set()
            for index, (case, text) in enumerate(iter_case_files(cases)):
                cut, _ = cut_out(text, case.line, case.column)
                if case.path not in opened:
                    # as an IDE does: the file is opened before anyone types in it
                    await client.file_opened(FileOpened(repository=Path(case.repo).name, path=case.path, text=text,
                                                        features=config.features))
                    opened.add(case.path)
                for mode in _order(index, config.modes):
                    row = await _one(client, case, cut, mode, config)
                    rows[mode].append(row)
                    if sink:
                        sink.write(json.dumps(row) + "\n")
                    if on_row:
                        on_row(row)
                    progress.advance(f"{mode} {row.get('latency_ms', 0):.0f} ms")
    finally:
        if sink:
            sink.close()
    return rows


async def _one(client: CompletionClient, case: Case, cut: str, mode: str, config: EvalConfig) -> dict[str, Any]:
    import time

    request = CompletionRequest(
        repository=Path(case.repo).name, path=case.path, text=cut, line=case.line, column=case.column,
        max_tokens=config.max_tokens, mode=mode,  # type: ignore[arg-type]
        features=config.features if mode == "optimized" else None,
        budget_tokens=config.budget_tokens, scenario="eval", request_id=f"eval-{mode}-{case.id}"[:128],
    )
    started = time.perf_counter()
    reply = await client.complete(request)
    latency_ms = (time.perf_counter() - started) * 1000
    row: dict[str, Any] = {"id": case.id, "mode": mode, "expected": case.expected}
    if "error" in reply:
        return {**row, "error": reply["error"]["code"], "message": reply["error"]["message"]}
    ctx = reply["context"]
    return {
        **row,
        "completion": reply["completion"],
        **score(reply["completion"], case.expected),
        "latency_ms": latency_ms,
        "server_total_ms": reply["timings"]["total_ms"],
        "prompt_tokens": ctx.get("prompt_tokens"),
        "cached_tokens": ctx.get("cached_tokens"),
        "kv_bytes": ctx.get("kv_bytes"),
        "retrieval_ms": (ctx.get("retrieval") or {}).get("elapsed_ms"),
        "retrieval_skipped": (ctx.get("retrieval") or {}).get("skipped"),
        "draft_proposed": reply.get("draft_tokens_proposed"),
        "draft_accepted": reply.get("draft_tokens_accepted"),
        "context_tokens": ctx["context_tokens"],
        "file_tokens": ctx["file_tokens"],
        "strategy": ctx["strategy"],
        "degraded": ctx.get("degraded"),
    }


def report_lines(summary: dict[str, dict[str, float]]) -> list[str]:
    keys = ("n", "errors", "exact_match", "edit_similarity", "identifier_match", "identifier_f1", "latency_ms_p50",
            "latency_ms_p95", "latency_ms_mean", "prompt_tokens_mean", "context_tokens_mean", "file_tokens_mean",
            "compression_ratio", "cache_hit_rate", "degraded")
    modes = [m for m in ("baseline", "optimized") if m in summary]
    lines = [f"{'metric':<22}" + "".join(f"{m:>14}" for m in modes) + ("   ratio/points" if "ratio" in summary else "")]
    ratio = summary.get("ratio", {})
    for key in keys:
        cells = "".join(f"{summary[m].get(key, float('nan')):>14.3f}" for m in modes)
        extra = ratio.get(key)
        lines.append(f"{key:<22}{cells}" + (f"   {extra:+.3f}" if extra is not None else ""))
    return lines
