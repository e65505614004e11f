"""What stopping the engine early saves while someone types: ``python -m benchmarks.early_stop [--file F]``.

A function body of a third-party file (default: rich's pretty.py, never used to tune anything here) is typed
back as in ``ctxpress bench --scenario typing``; at each pause the running appliance is asked at the editors'
token limit with ``early_stop`` on and off, in alternating order, after a one-token request that leaves the
step's prompt in the engine's cache, so both arms find it there and differ only in what they decode. Printed:
each arm's latency (p50/p95) and decode time, how many replies are the same text on and off (all of them,
unless the engine's speculation changes a token), and the ratios to off. A third arm caps the writing time
(``max_decode_ms``, llama.vim's ``t_max_predict_ms``, default 1,000 ms) and says how many lines it kept.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path
from typing import Any

from ctxpress.client import CompletionClient
from ctxpress.evaluation.bench_config import BenchConfig
from ctxpress.evaluation.progress import Progress
from ctxpress.evaluation.runner import percentile
from ctxpress.evaluation.typing_replay import TypingStep, typing_plan
from ctxpress_core.settings import get_settings
from ctxpress_core.wire.v1 import CompletionRequest

ARMS = ("on", "off", "cap")  # early_stop on, off, and on with --cap-ms of writing time (max_decode_ms)


def default_file() -> Path:
    import rich.pretty

    assert rich.pretty.__file__ is not None
    return Path(rich.pretty.__file__)


def request(path: Path, step: TypingStep, max_tokens: int, early_stop: bool,
            max_decode_ms: int | None = None) -> CompletionRequest:
    return CompletionRequest(repository="early-stop-bench", path=path.name, text=step.text, line=step.line,
                             column=step.column, max_tokens=max_tokens, scenario="bench-early-stop",
                             features={"early_stop": early_stop}, max_decode_ms=max_decode_ms)


async def run(path: Path, pauses: int, max_tokens: int, seed: int, cap_ms: int) -> dict[str, list[dict[str, Any]]]:
    settings = get_settings()
    cfg = BenchConfig(settings.effective_nats_url(), settings.completion_subject, typing_pauses=pauses, seed=seed)
    _opened, _line, steps = typing_plan(path, cfg)
    rows: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    progress = Progress(len(steps), "early stop")
    async with CompletionClient(cfg.nats_url, cfg.subject) as client:
        for index, step in enumerate(steps):
            await client.complete(request(path, step, 1, True))  # the step's prompt into the engine's cache
            for arm in (ARMS if index % 2 == 0 else ARMS[::-1]):
                reply = await client.complete(request(path, step, max_tokens, arm != "off",
                                                      cap_ms if arm == "cap" else None))
                if "error" in reply:
                    raise SystemExit(f"step {index}, early_stop {arm}: {reply['error']}")
                rows[arm].append(reply)
            progress.advance(", ".join(f"{arm} {rows[arm][-1]['timings']['total_ms']:.0f} ms" for arm in ARMS))
    return rows


def summary(replies: list[dict[str, Any]]) -> dict[str, float]:
    total = [r["timings"]["total_ms"] for r in replies]
    decode = [r["timings"]["decode_ms"] for r in replies]
    return {"p50_ms": percentile(total, 50), "p95_ms": percentile(total, 95),
            "decode_p50_ms": percentile(decode, 50), "decode_mean_ms": statistics.fmean(decode),
            "stopped_early": sum(r["finish_reason"] == "stop" for r in replies)}  # (the cap's ends say length)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.early_stop", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--file", type=Path, default=None, help="the file whose function is typed (default: rich)")
    p.add_argument("--pauses", type=int, default=16, help="completions asked for (each in both arms)")
    p.add_argument("--max-tokens", type=int, default=get_settings().default_max_tokens,
                   help="the token limit asked (default: the editors' default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cap-ms", type=int, default=1000, help="the cap arm's max_decode_ms (llama.vim's default)")
    args = p.parse_args(argv)
    path = args.file or default_file()
    rows = asyncio.run(run(path, args.pauses, args.max_tokens, args.seed, args.cap_ms))
    figures = {arm: summary(rows[arm]) for arm in ARMS}
    same = sum(a["completion"] == b["completion"] for a, b in zip(rows["on"], rows["off"], strict=True))
    print(f"{path} · {len(rows['on'])} pauses · max_tokens {args.max_tokens} · cap arm: max_decode_ms {args.cap_ms}")
    print(f"{'early_stop':<11}{'p50 ms':>9}{'p95 ms':>9}{'decode p50':>12}{'decode mean':>13}{'ended by stop':>15}")
    for arm in ARMS:
        f = figures[arm]
        print(f"{arm:<11}{f['p50_ms']:>9.0f}{f['p95_ms']:>9.0f}{f['decode_p50_ms']:>12.0f}{f['decode_mean_ms']:>13.0f}"
              f"{int(f['stopped_early']):>15}")
    off = figures["off"]
    for arm in ("on", "cap"):
        f = figures[arm]
        print(f"{arm}/off: p50 {f['p50_ms'] / off['p50_ms']:.2f}x, p95 {f['p95_ms'] / off['p95_ms']:.2f}x, "
              f"decode mean {f['decode_mean_ms'] / max(off['decode_mean_ms'], 1e-9):.2f}x")
    kept = sum(bool(r["completion"].strip()) for r in rows["cap"])
    print(f"same text on and off: {same} of {len(rows['on'])}; cap arm: {kept} non-empty, "
          f"mean {statistics.fmean(r['completion'].count(chr(10)) + 1 for r in rows['cap']):.1f} lines vs "
          f"{statistics.fmean(r['completion'].count(chr(10)) + 1 for r in rows['on']):.1f} uncapped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
