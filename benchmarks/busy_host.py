"""The engine's speed on a busy host, per thread count: ``python -m benchmarks.busy_host``.

For each background load (0 cores, then 1 core kept busy by spinning processes at ``--nice``), and each
thread setting (all cores, all but one, adaptive: the prompt on every core and generation on as many as
``serving.engine.host_load`` says), processes a prompt of ``--prompt-tokens`` tokens of third-party code in
``--chunk``-token chunks (the width a live prompt is processed in) and then ``--decode`` greedy tokens one at
a time ("threads" below: the generating ones). Rounds alternate the settings. Prints prompt tokens a second and
milliseconds a generated token per load and setting (the median of the rounds), each as a ratio to all cores on
a quiet host measured in the same run, and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from ctxpress.evaluation.busy import BackgroundLoad
from serving.engine.host_load import HostLoad
from serving.engine.llama_runner import LlamaRunner


def third_party_text() -> str:
    import sqlalchemy.orm.query as module

    assert module.__file__ is not None
    return Path(module.__file__).read_text(encoding="utf-8")


def settings(cores: int) -> dict[str, int | None]:
    """Thread count per setting (None: adaptive, as the engine sets them: the prompt on every core, generation
    on as many as HostLoad says before each run)."""
    return {"all cores": cores, "all but one": max(1, cores - 1), "adaptive": None}


def run_once(runner: LlamaRunner, prompt: list[int], chunk: int, decode: int, threads: int,
             prompt_threads: int | None = None) -> tuple[float, float]:
    """(prompt tokens a second, ms a generated token) generating on ``threads`` threads and processing the prompt
    on ``prompt_threads`` (None: as many), from an empty sequence."""
    runner.set_threads(threads, prompt_threads)
    runner.remove(0, 0)
    started = time.perf_counter()
    for i in range(0, len(prompt), chunk):
        runner.decode(0, prompt[i:i + chunk], i, all_logits=False)
    prompt_s = time.perf_counter() - started
    token, position = runner.argmax(-1), len(prompt)
    started = time.perf_counter()
    for _ in range(decode):
        runner.decode(0, [token], position, all_logits=False)
        token, position = runner.argmax(-1), position + 1
    return len(prompt) / prompt_s, (time.perf_counter() - started) * 1000 / max(decode, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.busy_host", description=__doc__)
    parser.add_argument("--model", type=Path, help="GGUF file (default: the packaged target model)")
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--chunk", type=int, default=128)
    parser.add_argument("--decode", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loads", default="0,1", help="cores kept busy beside the engine, comma-separated")
    parser.add_argument("--nice", type=int, default=10, help="the background load's nice level (0: a test run "
                        "started in a terminal; 10: a build that lowers its priority)")
    args = parser.parse_args(argv)
    if args.model is None:
        from ctxpress_core.settings import get_settings
        from serving.weights import TARGET, ensure_model

        args.model = ensure_model(TARGET, get_settings().models_dir)
    cores = os.cpu_count() or 1
    runner = LlamaRunner(args.model, n_ctx=args.prompt_tokens + args.decode + 16, n_slots=1, n_threads=cores,
                         n_batch=max(args.chunk, 1), kv_type="f16")
    prompt = runner.tokenize(third_party_text())[:args.prompt_tokens]
    run_once(runner, prompt[:32], args.chunk, 2, cores)  # first-use costs out of the figures
    loads = [int(x) for x in args.loads.split(",")]
    host = HostLoad().start()
    results: dict[str, dict[str, dict[str, float]]] = {}
    total = len(loads) * args.rounds * len(settings(cores))
    done = 0
    for load in loads:
        busy = BackgroundLoad(load, args.nice)
        busy.start()
        time.sleep(3.0)  # the host load's estimate follows the change
        runs: dict[str, list[tuple[float, float, int]]] = {}
        try:
            for round_ in range(args.rounds):
                names = list(settings(cores).items())
                for name, fixed in (names if round_ % 2 == 0 else names[::-1]):
                    threads = fixed if fixed is not None else host.threads(cores)
                    tps, ms = run_once(runner, prompt, args.chunk, args.decode, threads,
                                       cores if fixed is None else None)
                    runs.setdefault(name, []).append((tps, ms, threads))
                    done += 1
                    print(f"[{done}/{total}] load {load}: {name} ({threads} threads): {tps:.1f} prompt tokens/s, "
                          f"{ms:.0f} ms a generated token", file=sys.stderr, flush=True)
        finally:
            busy.stop()
        results[f"load {load}"] = {
            name: {"prompt_tokens_per_s": statistics.median(r[0] for r in rs),
                   "ms_per_generated_token": statistics.median(r[1] for r in rs),
                   "threads": statistics.median(r[2] for r in rs)}
            for name, rs in runs.items()}
        print(f"load {load}: the background took {busy.cpu_s:.1f} s of CPU", file=sys.stderr)
    host.stop()
    base = results[f"load {loads[0]}"]["all cores"]
    print(f"{'load':<8}{'setting':<13}{'threads':>8}{'prompt tok/s':>14}{'x quiet':>9}{'ms/token':>10}{'x quiet':>9}")
    for load_name, rows in results.items():
        for name, row in rows.items():
            row["prompt_vs_quiet_all_cores"] = row["prompt_tokens_per_s"] / base["prompt_tokens_per_s"]
            row["decode_vs_quiet_all_cores"] = row["ms_per_generated_token"] / base["ms_per_generated_token"]
            print(f"{load_name:<8}{name:<13}{row['threads']:>8.0f}{row['prompt_tokens_per_s']:>14.1f}"
                  f"{row['prompt_vs_quiet_all_cores']:>9.2f}{row['ms_per_generated_token']:>10.0f}"
                  f"{row['decode_vs_quiet_all_cores']:>9.2f}")
    print(json.dumps({"cores": cores, "nice": args.nice, "prompt_tokens": len(prompt), "chunk": args.chunk,
                      "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
