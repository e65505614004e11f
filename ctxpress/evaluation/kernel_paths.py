"""Prompt and decode speed per CPU kernel path (AMX / AVX-512 / AVX2, forced), against a baseline measured
in the same run: ``ctxpress bench --scenario kernels`` (or ``python -m ctxpress.evaluation.kernel_paths``).

Each path runs in its own process (``CTXPRESS_CPU_KERNELS=<path>``: ggml keeps one CPU backend a process,
``serving.engine.cpu_kernels``), which loads the model, processes a prompt of ``--prompt-tokens`` tokens of
third-party code in ``--batch``-token batches (the engine's width) from an empty sequence, then generates
``--decode`` greedy tokens one at a time, ``--rounds`` times after a short warm-up. The paths are run in
``--passes`` passes, every other one in reverse order, so a neighbour's load falls on all of them alike. A path this
host cannot run (AMX on a CPU without it, or where Linux refuses the tile state) is reported, not run.

``make install`` builds llama.cpp for this host alone: one path, which is what the default measures then (``auto``,
the build's variant named); a path asked for that the build does not hold is reported as not available. A build of
every variant (``make install LLAMA_VARIANTS=all``) is measured on ``auto``, ``amx``, ``avx512`` and ``avx2``.

``today`` is another Python whose llama-cpp-python is the build to compare with (``--baseline-python``,
e.g. a venv built the old way, -march=native without AMX); it runs this same code. The ratios are to
``today`` when it is measured, else to ``auto``. Prints progress, a table (per path the best round, which a
neighbour's load disturbed least and which the ratios compare, and the median), the load average before and
after, and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from serving.engine.llama_runner import LlamaRunner


PATHS = ("today", "auto", "amx", "avx512", "avx2")
DEFAULT_PATHS = ("auto", "amx", "avx512", "avx2")
UNAVAILABLE = 3  # the child's exit status when its path does not run here


def third_party_text() -> str:
    import sqlalchemy.orm.query as module  # third-party code, never the standard library

    assert module.__file__ is not None
    return Path(module.__file__).read_text(encoding="utf-8")


@dataclass
class Round:
    """One prompt and its generated tokens: wall-clock rates, and the same per CPU-second of this process (which
    a neighbour's load disturbs far less: with one thread, the kernels' own cost)."""

    prompt_tokens_per_s: float
    ms_per_token: float
    prompt_tokens_per_cpu_s: float
    cpu_ms_per_token: float


def run_once(runner: LlamaRunner, prompt: list[int], batch: int, decode: int) -> Round:
    """One round from an empty sequence."""
    runner.remove(0, 0)
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(prompt), batch):
        runner.decode(0, prompt[i:i + batch], i, all_logits=False)
    prompt_s, prompt_cpu = time.perf_counter() - wall, time.process_time() - cpu
    token, position = runner.argmax(-1), len(prompt)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(decode):
        runner.decode(0, [token], position, all_logits=False)
        token, position = runner.argmax(-1), position + 1
    n = max(decode, 1)
    return Round(len(prompt) / prompt_s, (time.perf_counter() - wall) * 1000 / n,
                 len(prompt) / max(prompt_cpu, 1e-9), (time.process_time() - cpu) * 1000 / n)


def child(args: argparse.Namespace) -> int:
    from serving.engine.cpu_kernels import KernelPathUnavailable
    from serving.engine.llama_runner import LlamaRunner

    cores = args.threads or os.cpu_count() or 1
    started = time.perf_counter()
    try:
        runner = LlamaRunner(args.model, n_ctx=args.prompt_tokens + args.decode + 16, n_slots=1, n_threads=cores,
                             n_batch=args.batch, kv_type="f16")
    except KernelPathUnavailable as exc:
        print(json.dumps({"unavailable": str(exc)}))
        return UNAVAILABLE
    load_s = time.perf_counter() - started
    prompt = runner.tokenize(third_party_text())[:args.prompt_tokens]
    run_once(runner, prompt[:64], args.batch, 2)  # first-use costs out of the figures
    rounds = [run_once(runner, prompt, args.batch, args.decode) for _ in range(args.rounds)]
    backend = runner.cpu_backend
    print(json.dumps({"variant": backend.variant, "path": backend.path, "amx": backend.amx.reason,
                      "features": sorted(k for k, v in backend.features.items() if v == "1"),
                      "load_s": load_s, "prompt_tokens": len(prompt), "threads": cores,
                      "prompt_tokens_per_s": [r.prompt_tokens_per_s for r in rounds],
                      "ms_per_token": [r.ms_per_token for r in rounds],
                      "prompt_tokens_per_cpu_s": [r.prompt_tokens_per_cpu_s for r in rounds],
                      "cpu_ms_per_token": [r.cpu_ms_per_token for r in rounds]}))
    return 0


def installed_build() -> str:
    """What this Python's llama-cpp-python holds, in words (nothing is loaded)."""
    from serving.engine.cpu_kernels import build_kind, installed_lib_dir

    lib_dir = installed_lib_dir()
    kind = "none" if lib_dir is None else build_kind(lib_dir)
    return {"variants": "every x86-64 variant of ggml's CPU backend (LLAMA_VARIANTS=all): a path per variant",
            "host": "built for this host alone (`make install`): one kernel path; "
                    "`make install LLAMA_VARIANTS=all` builds the others",
            }.get(kind, "no CPU backend found")


def default_paths(build: str) -> tuple[str, ...]:
    return DEFAULT_PATHS if build.startswith("every") else ("auto",)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclass
class PathRun:
    """One process's figures for one path."""

    variant: str
    features: list[str]
    amx: str
    prompt_tokens_per_s: list[float]
    ms_per_token: list[float]
    prompt_tokens_per_cpu_s: list[float]
    cpu_ms_per_token: list[float]


def measure(python: str, path: str, args: argparse.Namespace) -> PathRun | str:
    """The figures of one process on ``path``, or why the path does not run here."""
    env = {**os.environ, "CTXPRESS_CPU_KERNELS": "auto" if path == "today" else path}
    command = [python, "-m", "ctxpress.evaluation.kernel_paths", "--child", "--model", str(args.model),
               "--prompt-tokens", str(args.prompt_tokens), "--decode", str(args.decode), "--batch", str(args.batch),
               "--rounds", str(args.rounds), "--threads", str(args.threads)]
    done = subprocess.run(command, env=env, cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode not in (0, UNAVAILABLE) or not lines:
        raise RuntimeError(f"{path}: exit {done.returncode}\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1])
    if "unavailable" in result:
        return str(result["unavailable"])
    return PathRun(result["variant"], result["features"], result["amx"], result["prompt_tokens_per_s"],
                   result["ms_per_token"], result["prompt_tokens_per_cpu_s"], result["cpu_ms_per_token"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ctxpress.evaluation.kernel_paths", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run(args)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, help="GGUF file (default: the packaged target model)")
    parser.add_argument("--paths", help="comma-separated, of: " + ", ".join(PATHS) + " (today: with "
                        "--baseline-python; default: " + ",".join(DEFAULT_PATHS) + " where llama.cpp holds every "
                        "variant, auto where it is built for this host alone)")
    parser.add_argument("--baseline-python", help="the Python of the build called `today` (its venv's bin/python)")
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="0: every core")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    if args.model is None:
        from ctxpress_core.settings import get_settings
        from serving.weights import model_path

        args.model = model_path(get_settings())
    if args.child:
        return child(args)

    build = installed_build()
    print(f"llama.cpp: {build}", file=sys.stderr, flush=True)
    paths = [p.strip() for p in (args.paths or ",".join(default_paths(build))).split(",") if p.strip()]
    if args.baseline_python and "today" not in paths:
        paths.insert(0, "today")
    unknown = set(paths) - set(PATHS)
    if unknown:
        print(f"error: unknown kernel paths: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    if "today" in paths and not args.baseline_python:
        print("today: skipped (no --baseline-python)", file=sys.stderr)
        paths.remove("today")
    before = load_average()
    print(f"{os.cpu_count()} cores, load average before: {before}; paths: {', '.join(paths)}; "
          f"{args.passes} passes x {args.rounds} rounds", file=sys.stderr, flush=True)
    runs: dict[str, list[PathRun]] = {}
    unavailable: dict[str, str] = {}
    total, done = len(paths) * args.passes, 0
    for pass_ in range(args.passes):
        for path in (paths if pass_ % 2 == 0 else paths[::-1]):
            done += 1
            if path in unavailable:
                continue
            python = args.baseline_python if path == "today" else sys.executable
            result = measure(python, path, args)
            if isinstance(result, str):
                unavailable[path] = result
                print(f"[{done}/{total}] {path}: not available here: {result}", file=sys.stderr, flush=True)
                continue
            runs.setdefault(path, []).append(result)
            tps = ", ".join(f"{x:.1f}" for x in result.prompt_tokens_per_s)
            ms = ", ".join(f"{x:.1f}" for x in result.ms_per_token)
            cpu = ", ".join(f"{x:.1f}/{y:.1f}" for x, y in zip(result.prompt_tokens_per_cpu_s, result.cpu_ms_per_token,
                                                                 strict=True))
            print(f"[{done}/{total}] {path} ({result.variant}): prompt {tps} tokens/s; decode {ms} ms/token; "
                  f"per CPU-second {cpu}; load {load_average()}", file=sys.stderr, flush=True)
    after = load_average()

    # Best: the least disturbed round (a neighbour's load only ever slows a round down), the figure the ratios
    # compare; the median beside it.
    rows: dict[str, dict[str, object]] = {}
    best_tps: dict[str, float] = {}
    best_ms: dict[str, float] = {}
    cpu_tps: dict[str, float] = {}
    cpu_ms: dict[str, float] = {}
    for path, results in runs.items():
        tps = [x for r in results for x in r.prompt_tokens_per_s]
        ms = [x for r in results for x in r.ms_per_token]
        best_tps[path], best_ms[path] = max(tps), min(ms)
        cpu_tps[path] = statistics.median(x for r in results for x in r.prompt_tokens_per_cpu_s)
        cpu_ms[path] = statistics.median(x for r in results for x in r.cpu_ms_per_token)
        rows[path] = {"prompt_tokens_per_cpu_s": round(cpu_tps[path], 2), "cpu_ms_per_token": round(cpu_ms[path], 2),
                      "variant": results[0].variant, "features": results[0].features, "amx": results[0].amx,
                      "prompt_tokens_per_s": round(max(tps), 2), "ms_per_token": round(min(ms), 2),
                      "prompt_tokens_per_s_median": round(statistics.median(tps), 2),
                      "ms_per_token_median": round(statistics.median(ms), 2), "samples": len(ms)}
    base = "today" if "today" in rows else "auto" if "auto" in rows else next(iter(rows), "")
    print(f"\n{'path':<8}{'variant':<16}{'prompt tok/s':>13}{'(median)':>10}{'x ' + base:>9}"
          f"{'ms/token':>10}{'(median)':>10}{'x ' + base:>9}")
    for path in paths:
        if path in unavailable:
            print(f"{path:<8}{'-':<16}not available: {unavailable[path]}")
            continue
        row = rows[path]
        prompt_x, decode_x = best_tps[path] / best_tps[base], best_ms[path] / best_ms[base]
        row.update(prompt_vs_base=round(prompt_x, 3), decode_vs_base=round(decode_x, 3))
        print(f"{path:<8}{runs[path][0].variant:<16}{best_tps[path]:>13.1f}{row['prompt_tokens_per_s_median']:>10}"
              f"{prompt_x:>9.2f}{best_ms[path]:>10.1f}{row['ms_per_token_median']:>10}{decode_x:>9.2f}")
    print(f"\nper CPU-second of the engine process (medians; a neighbour's load disturbs these far less, and with "
          f"--threads 1 they are the kernels' own cost)\n{'path':<8}{'variant':<16}{'tok/CPU-s':>13}{'x ' + base:>9}"
          f"{'CPU-ms/tok':>12}{'x ' + base:>9}")
    for path in paths:
        if path in runs:
            rows[path].update(cpu_prompt_vs_base=round(cpu_tps[path] / cpu_tps[base], 3),
                              cpu_decode_vs_base=round(cpu_ms[path] / cpu_ms[base], 3))
            print(f"{path:<8}{runs[path][0].variant:<16}{cpu_tps[path]:>13.1f}{cpu_tps[path] / cpu_tps[base]:>9.2f}"
                  f"{cpu_ms[path]:>12.1f}{cpu_ms[path] / cpu_ms[base]:>9.2f}")
    print(f"load average before {before}, after {after}; prompt {args.prompt_tokens} tokens in {args.batch}-token "
          f"batches, {args.decode} generated tokens; best and median of {args.passes} passes x {args.rounds} rounds; "
          f"ratios of the best")
    print(json.dumps({"cores": os.cpu_count(), "threads": args.threads or os.cpu_count(), "build": build,
                      "load_before": before, "load_after": after, "baseline": base,
                      "prompt_tokens": args.prompt_tokens, "batch": args.batch, "decode": args.decode,
                      "results": rows, "unavailable": unavailable}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
