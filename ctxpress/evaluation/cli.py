"""CLI of the measurement tools: ``eval``, ``eval make-cases``, ``stats`` (``bench`` in bench.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from ctxpress.evaluation.scenarios import SCENARIOS
from ctxpress_core.features import parse_list
from ctxpress_core.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    ev = sub.add_parser("eval", help="quality and latency, baseline against optimized (see also `eval make-cases`)")
    ev.add_argument("--cases", type=Path, help="JSONL file of cases (or --benchmark)")
    ev.add_argument("--benchmark", choices=["humaneval-single", "humaneval-multi", "humaneval-span"],
                    help="a public FIM benchmark instead of --cases: HumanEval infilling, each completion run with "
                         "its tests in a sandbox (pass@1) beside EM/ES (see ctxpress/evaluation/humaneval.py)")
    ev.add_argument("--mode", choices=["baseline", "optimized", "both", "none"],
                    help="default: both with --cases, optimized with --benchmark; none: --benchmark with only "
                         "the --peer-server arm (e.g. another model file, by CTXPRESS_MODEL_PATH)")
    ev.add_argument("--features", default="",
                    help="ablation for optimized: --features=-summaries, --features crop=off,summaries=on")
    ev.add_argument("--out", type=Path, help="write one JSON line per request here")
    ev.add_argument("--limit", type=int, help="only the first N cases; with --benchmark a seeded sample of N tasks")
    ev.add_argument("--seed", type=int, default=0, help="--benchmark: the seed of the --limit sample")
    ev.add_argument("--max-tokens", type=int,
                    help="default: 24 with --cases (scoring reads the first line only); with --benchmark the "
                         "editors' default (settings.default_max_tokens)")
    ev.add_argument("--peer-server", type=Path, metavar="LLAMA_SERVER",
                    help="--benchmark: also ask this llama-server binary, same model file, plain FIM prompt")
    ev.add_argument("--canonical", action="store_true",
                    help="--benchmark: score the canonical solutions instead of a model (the harness's own check; "
                         "needs no services)")
    ev.add_argument("--data", type=Path,
                    help="--benchmark: the folder of the data files (default: $CTXPRESS_HUMANEVAL_DIR or "
                         "../shared/bench/human-eval-infilling)")
    ev.add_argument("--test-timeout", type=float, default=10.0, help="--benchmark: seconds each task's tests may run")
    ev.add_argument("--budget", type=int, help="context budget in tokens (default: the deployment's)")
    ev.add_argument("--gate", type=float, metavar="POINTS",
                    help="exit 1 when optimized exact match is more than POINTS below baseline (stop-loss)")
    ev.set_defaults(func=cmd_eval)

    be = sub.add_parser("bench", help="serving under load and over time: scenarios, baseline and optimized")
    be.add_argument("--scenario", action="append",
                    choices=SCENARIOS,
                    help="run only these (repeatable; default: all but team, which is compared across two "
                         "server set-ups: CTXPRESS_BATCHING=true and false, and reopen)")
    be.add_argument("--file", type=Path, action="append", default=[],
                    help="use this file (typing: the file to replay; others: where cursors are taken)")
    be.add_argument("--requests", type=int, default=6, help="requests per scenario and mode")
    be.add_argument("--clients", type=int, default=3,
                    help="simulated IDEs in the concurrency and team scenarios (team: all but one type)")
    be.add_argument("--max-seconds", type=float, default=900.0, help="bound on each scenario")
    be.add_argument("--typing-pauses", type=int, default=12, help="completions asked for in a typing replay")
    be.add_argument("--mode", choices=["baseline", "optimized", "both"], default="both")
    be.add_argument("--features", default="", help="optimized mode's switches, as for eval: --features=-prefix_cache")
    be.add_argument("--peer-server", type=Path, metavar="LLAMA_SERVER",
                    help="typing: replay the session against this llama-server binary too, asked as llama.vscode "
                         "asks (same model file; see ctxpress/evaluation/peer.py)")
    be.add_argument("--via", choices=["lsp", "infill"],
                    help="typing: replay it through `ctxpress lsp` too, as an editor drives it (every keystroke a "
                         "didChange; the forward cache and debounce count), or (infill) through `ctxpress "
                         "serve-http` as llama.vscode asks, beside the same replay sent to NATS")
    be.add_argument("--editors", type=int, default=8, help="load: editors typing at once")
    be.add_argument("--minutes", type=float, default=5.0, help="load: how long they type")
    be.add_argument("--fast-typist", action="store_true",
                    help="with --via lsp: a request at every keystroke, each superseding the last; engine time "
                         "on superseded requests with and without abandoning them in the appliance")
    be.add_argument("--jump-layout", action="append", default=[], metavar="LABEL:FEATURES",
                    help="jump: a prompt layout to compare, e.g. today:-stable_head (repeatable; the same cursors "
                         "for each, in the order given)")
    be.add_argument("--kernel-paths", default="auto,amx,avx512,avx2",
                    help="kernels: the CPU kernel paths to measure, each in a process of its own (a path the host "
                         "cannot run is reported, not run)")
    be.add_argument("--baseline-python", metavar="PYTHON",
                    help="kernels: measure this Python's llama.cpp build too, as `today`, the baseline of the ratios "
                         "(default baseline: auto)")
    be.add_argument("--background-load", type=int, default=0, metavar="N",
                    help="keep N cores busy beside the appliance (busy loops, as a compile or a test run would) "
                         "while the benchmark runs: the busy-host figure")
    be.add_argument("--background-nice", type=int, default=10, metavar="NICE",
                    help="the background load's nice level: 10 (default) as a build that lowers its priority, "
                         "0 as a test run started in a terminal")
    be.set_defaults(func=cmd_bench)

    st = sub.add_parser("stats", help="summarise per-request telemetry")
    st.add_argument("--since", default="1h", help="time span, e.g. 30m, 1h, 7d")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_stats)


def make_cases_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ctxpress eval make-cases",
                                description="build evaluation cases from the code of any repository")
    p.add_argument("--repo", type=Path, required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-lines", type=int, default=0, help="only files of at least this many lines")
    p.add_argument("--max-lines", type=int, default=0, help="only files of at most this many lines (0: any)")
    p.add_argument("--cross-file", action="store_true",
                   help="only cursors whose expected text uses a name defined in another file of the repository")
    p.add_argument("--out", type=Path, help="write the cases here (default: stdout)")
    return p


def cmd_make_cases(argv: list[str]) -> int:
    from ctxpress.evaluation.cases import make_cases, write_cases
    from ctxpress.evaluation.progress import Progress

    args = make_cases_parser().parse_args(argv)
    if not args.repo.is_dir():
        print(f"error: {args.repo} is not a directory", file=sys.stderr)
        return 2
    bar: list[Progress] = []

    def progress(done: int, total: int) -> None:
        if not bar:
            bar.append(Progress(total, "scanning files"))
        bar[0].advance()

    cases = make_cases(args.repo, args.n, args.seed, args.min_lines, progress=progress, max_lines=args.max_lines,
                       cross_file=args.cross_file)
    if args.out:
        write_cases(cases, args.out)
    else:
        sys.stdout.write("".join(c.to_json() + "\n" for c in cases))
    files = len({c.path for c in cases})
    print(f"{len(cases)} cases from {files} files of {args.repo}"
          + (f" (asked for {args.n}: not enough candidate lines)" if len(cases) < args.n else ""), file=sys.stderr)
    return 0 if cases else 1


def cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    if (args.cases is None) == (args.benchmark is None):
        print("error: give one of --cases or --benchmark", file=sys.stderr)
        return 2
    if args.benchmark is not None:
        return _benchmark(args, settings)
    if args.peer_server is not None or args.canonical:
        print("error: --peer-server and --canonical go with --benchmark", file=sys.stderr)
        return 2
    if args.mode == "none":
        print("error: --mode none goes with --benchmark and --peer-server", file=sys.stderr)
        return 2
    args.mode = args.mode or "both"
    args.max_tokens = args.max_tokens or 24
    from ctxpress.evaluation.cases import read_cases
    from ctxpress.evaluation.runner import EvalConfig, ratios, report_lines, run_eval, summarise

    try:
        features = parse_list(args.features) if args.features else None
        cases = read_cases(args.cases)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.limit:
        cases = cases[: args.limit]
    modes = ["baseline", "optimized"] if args.mode == "both" else [args.mode]
    config = EvalConfig(settings.effective_nats_url(), settings.completion_subject, modes, features,
                        args.max_tokens, args.budget)
    rows = asyncio.run(run_eval(cases, config, args.out))
    summary: dict[str, Any] = {mode: summarise(rows[mode]) for mode in modes}
    if args.mode == "both":
        summary["ratio"] = ratios(summary["baseline"], summary["optimized"])
    summary["n"] = len(cases)
    if features:
        summary["features"] = features
    for line in report_lines(summary):
        print(line)
    status = 0
    if args.gate is not None:
        if args.mode != "both":
            print("error: --gate needs --mode both", file=sys.stderr)
            return 2
        drop = (summary["baseline"].get("exact_match", 0) - summary["optimized"].get("exact_match", 0)) * 100
        verdict = "FAIL" if drop > args.gate else "pass"
        where = f"{drop:.1f} points below" if drop > 0 else f"{-drop:.1f} points above" if drop < 0 else "equal to"
        print(f"quality gate: optimized exact match is {where} baseline (limit {args.gate:g} below): {verdict}")
        status = 1 if drop > args.gate else 0
        summary["gate"] = {"limit_points": args.gate, "drop_points": drop, "passed": status == 0}
    print(json.dumps(summary))
    return status


def _benchmark(args: argparse.Namespace, settings: Settings) -> int:
    from ctxpress.evaluation.humaneval import (
        BenchmarkConfig,
        choose,
        default_data_dir,
        load_tasks,
        paired_lines,
        report_lines,
        run_benchmark,
        summarise,
    )

    if args.features or args.budget or args.gate is not None:
        print("error: --features, --budget and --gate go with --cases", file=sys.stderr)
        return 2
    if args.peer_server is not None and not args.peer_server.is_file():
        print(f"error: --peer-server {args.peer_server}: no such file", file=sys.stderr)
        return 2
    data = args.data or default_data_dir()
    try:
        every = load_tasks(args.benchmark, data)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    tasks = choose(every, args.limit, args.seed)
    mode = args.mode or "optimized"
    if mode == "none" and (args.peer_server is None or args.canonical):
        print("error: --mode none needs --peer-server (and no --canonical)", file=sys.stderr)
        return 2
    modes = ([] if args.canonical or mode == "none" else ["optimized", "baseline"] if mode == "both"
             else [mode])
    model = None
    if args.peer_server is not None and not args.canonical:
        from serving.weights import TARGET, ensure_model

        model = Path(settings.model_path or ensure_model(TARGET, settings.models_dir))
    config = BenchmarkConfig(args.benchmark, settings.effective_nats_url(), settings.completion_subject, modes,
                             args.max_tokens or settings.default_max_tokens,
                             peer_server=None if args.canonical else args.peer_server, model=model,
                             peer_threads=os.cpu_count() or 2, test_timeout_s=args.test_timeout,
                             canonical=args.canonical)
    load_before = _load_average()
    try:
        rows = asyncio.run(run_benchmark(tasks, config, args.out))
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summary = {arm: summarise(arm_rows) for arm, arm_rows in rows.items()}
    selection = (f"seeded sample, seed {args.seed}" if args.limit and args.limit < len(every) else "all")
    meta = {"benchmark": args.benchmark, "n": len(tasks), "total": len(every), "selection": selection,
            "max_tokens": config.max_tokens, "load_before": load_before, "load_after": _load_average()}
    for line in [*report_lines(args.benchmark, summary, meta), *paired_lines(rows)]:
        print(line)
    print(json.dumps({"benchmark": meta, "arms": summary}))
    return 0


def _load_average() -> str:
    """The host's 1/5/15-minute load averages (figures are stated with the load they ran under)."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


async def _editor_typing(typing_file: Path | None, cfg: Any, settings: Settings,
                         fast_typist: bool) -> dict[str, dict[str, Any]]:
    """The typing replay through `ctxpress lsp` (and, with ``fast_typist``, the superseding typist
    with and without abandoning superseded requests in the appliance)."""
    from ctxpress.evaluation.bench import third_party_root
    from ctxpress.evaluation.bench_report import summarise
    from ctxpress.evaluation.editor_replay import (
        FAST_TYPIST_KEYSTROKES,
        editor_overhead,
        forward_cache_share,
        supersede,
        typing_via_lsp,
    )
    from ctxpress.evaluation.progress import Progress

    path = typing_file or third_party_root() / "engine" / "result.py"
    env = dict(os.environ)
    samples = await typing_via_lsp(path, cfg, env, Progress(cfg.typing_pauses, "typing via lsp"))
    out: dict[str, dict[str, Any]] = {"lsp": {**summarise(samples), **forward_cache_share(samples),
                                              **await editor_overhead(samples, settings.effective_database_url())}}
    if fast_typist:
        status_file = settings.run_dir / "engine-status.json"
        # every keystroke's request sent (debounce 1 ms) and kept, then abandoned when superseded; then
        # the server's defaults: abandoned, and the adaptive debounce deciding when to send
        for name, abandon, debounce_ms in (("keep", False, 1), ("abandon", True, 1), ("default", True, None)):
            progress = Progress(FAST_TYPIST_KEYSTROKES, f"fast typist ({name})")
            out[f"fast_typist_{name}"] = await supersede(path, cfg, env, status_file, settings.effective_database_url(),
                                                         progress, abandon=abandon, debounce_ms=debounce_ms)
    return out


async def _bridge_typing(typing_file: Path | None, cfg: Any) -> dict[str, Any]:
    """The typing replay through `ctxpress serve-http`, asked as llama.vscode asks."""
    from ctxpress.evaluation.bench import third_party_root
    from ctxpress.evaluation.bench_report import summarise
    from ctxpress.evaluation.bridge_replay import bridge_overhead, typing_via_infill
    from ctxpress.evaluation.progress import Progress

    path = typing_file or third_party_root() / "engine" / "result.py"
    samples = await typing_via_infill(path, cfg, dict(os.environ), Progress(cfg.typing_pauses, "typing via infill"))
    return {**summarise(samples), **bridge_overhead(samples)}


def _shards(settings: Settings) -> int:
    from ctxpress.evaluation.bench import third_party_root
    from ctxpress.evaluation.shards_bench import report_lines, run_shards_bench
    from serving.weights import TARGET, ensure_model

    model = settings.model_path or ensure_model(TARGET, settings.models_dir)
    try:
        figures = run_shards_bench(model, third_party_root(), report=lambda line: print(line, file=sys.stderr))
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in report_lines(figures):
        print(line)
    print(json.dumps({"shards": figures}))
    return 0


def cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    from ctxpress.evaluation.bench import run_bench
    from ctxpress.evaluation.bench_config import BenchConfig
    from ctxpress.evaluation.bench_report import final_line, report_lines
    from ctxpress.evaluation.busy import BackgroundLoad
    from ctxpress.evaluation.scenarios import DEFAULT_SCENARIOS
    from ctxpress_core.features import parse_list

    modes = ["baseline", "optimized"] if args.mode == "both" else [args.mode]
    try:
        features = parse_list(args.features) or None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        layouts = [(label, parse_list(spec) or None)
                   for label, _, spec in (layout.partition(":") for layout in args.jump_layout)]
    except ValueError as exc:
        print(f"error: --jump-layout: {exc}", file=sys.stderr)
        return 2
    cfg = BenchConfig(settings.effective_nats_url(), settings.completion_subject, modes=modes,
                      requests=args.requests, clients=args.clients, max_seconds=args.max_seconds,
                      typing_pauses=args.typing_pauses, features=features, kv_pool_slots=settings.kv_pool_slots,
                      jump_layouts=layouts)
    scenarios = args.scenario or list(DEFAULT_SCENARIOS)
    if "shards" in scenarios:
        if scenarios != ["shards"]:
            print("error: --scenario shards runs alone (it starts a topology of its own)", file=sys.stderr)
            return 2
        return _shards(settings)
    if "load" in scenarios:
        if scenarios != ["load"]:
            print("error: --scenario load runs alone (it measures the appliance's memory)", file=sys.stderr)
            return 2
        return _load(cfg, args, settings)
    if "kernels" in scenarios:
        if scenarios != ["kernels"]:
            print("error: --scenario kernels runs alone (it loads the model in processes of its own)", file=sys.stderr)
            return 2
        return _kernels(args, settings)
    typing_file = next((f for f in args.file), None) if {"typing", "jump"} & set(scenarios) else None
    others = [] if set(scenarios) <= {"typing", "jump"} else args.file
    if args.peer_server is not None and not args.peer_server.is_file():
        print(f"error: --peer-server {args.peer_server}: no such file", file=sys.stderr)
        return 2
    if args.peer_server is not None and "typing" not in scenarios:
        print("error: --peer-server replays the typing scenario: add --scenario typing", file=sys.stderr)
        return 2
    if args.via is not None and "typing" not in scenarios:
        print(f"error: --via {args.via} replays the typing scenario: add --scenario typing", file=sys.stderr)
        return 2
    try:
        busy = BackgroundLoad(args.background_load, args.background_nice)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        busy.start()
        results = asyncio.run(run_bench(cfg, scenarios, typing_file, others))
        if args.peer_server is not None and "typing" in scenarios:
            results["typing"]["peer"] = asyncio.run(_peer_typing(args.peer_server, typing_file, cfg, settings))
        if args.via == "lsp":
            results["typing"].update(asyncio.run(_editor_typing(typing_file, cfg, settings, args.fast_typist)))
            straight = results["typing"].get("optimized", {}).get("client_added_ms_p50")
            editor = results["typing"]["lsp"].get("editor_added_ms_p50")
            # the figure: what the editor path adds over asking NATS directly, both measured here
            results["typing"]["lsp"]["editor_over_nats_ms_p50"] = (
                editor - straight if editor is not None and straight is not None else None)
        if args.via == "infill":
            results["typing"]["infill"] = asyncio.run(_bridge_typing(typing_file, cfg))
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        busy.stop()
    if args.background_load:
        results["host"] = {"background": {"busy_cores": args.background_load, "nice": args.background_nice,
                                           "busy_cpu_s": busy.cpu_s}}
    for line in report_lines(results):
        print(line)
    print(final_line(results))
    return 0


async def _peer_typing(binary: Path, typing_file: Path | None, cfg: Any, settings: Settings) -> dict[str, Any]:
    from ctxpress.evaluation.bench import third_party_root
    from ctxpress.evaluation.bench_report import summarise
    from ctxpress.evaluation.peer import peer_typing
    from ctxpress.evaluation.progress import Progress
    from serving.weights import TARGET, ensure_model

    model = settings.model_path or ensure_model(TARGET, settings.models_dir)
    path = typing_file or third_party_root() / "engine" / "result.py"
    progress = Progress(cfg.typing_pauses, "peer")
    samples = await peer_typing(binary, Path(model), path, cfg, progress, threads=os.cpu_count() or 2)
    return summarise(samples)


def cmd_stats(args: argparse.Namespace, settings: Settings) -> int:
    from ctxpress.evaluation.stats import collect, parse_since, render

    try:
        since = parse_since(args.since)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stats = collect(settings.effective_database_url(), since)
    print(json.dumps(stats, default=float) if args.json else render(stats, args.since))
    return 0


def _kernels(args: argparse.Namespace, settings: Settings) -> int:
    """Prompt and decode speed per CPU kernel path (ctxpress.evaluation.kernel_paths), without the appliance."""
    from ctxpress.evaluation.kernel_paths import DEFAULT_PATHS, run
    from serving.weights import TARGET, ensure_model

    model = settings.model_path or ensure_model(TARGET, settings.models_dir)
    figures = argparse.Namespace(model=Path(model), paths=args.kernel_paths or ",".join(DEFAULT_PATHS),
                                 baseline_python=args.baseline_python, prompt_tokens=1000, decode=32, batch=512,
                                 rounds=2, passes=3, threads=0, child=False)
    try:
        return run(figures)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _load(cfg: Any, args: argparse.Namespace, settings: Settings) -> int:
    from ctxpress.evaluation.load import LoadConfig, report_lines, run_load, summary

    if args.editors < 1 or args.minutes <= 0:
        print("error: --editors and --minutes must be positive", file=sys.stderr)
        return 2
    load = LoadConfig(editors=args.editors, minutes=args.minutes)
    try:
        result = asyncio.run(run_load(cfg, load, settings))
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    figures = summary(result, load)
    for line in report_lines(figures):
        print(line)
    print(json.dumps({"scenarios": {"load": figures}}))
    return 0
