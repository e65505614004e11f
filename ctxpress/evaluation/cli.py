"""The measurement tools' command line: the arguments of ``eval``, ``bench`` and ``stats``, and the two short
commands, ``eval make-cases`` and ``stats``. ``eval`` runs in eval_command.py, ``bench`` in bench_command.py."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ctxpress.evaluation.bench_command import cmd_bench
from ctxpress.evaluation.eval_command import cmd_eval
from ctxpress.evaluation.scenarios import SCENARIOS
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
                    help="ablation for optimized: --features=-summaries, --features crop=off,summaries=on; the plan to "
                         "the latency target is off unless named (+plan: the first suggestion at a cold cursor)")
    ev.add_argument("--out", type=Path, help="write one JSON line per request here")
    ev.add_argument("--limit", type=int, help="only the first N cases; with --benchmark a seeded sample of N tasks")
    ev.add_argument("--seed", type=int, default=0, help="--benchmark: the seed of the --limit sample")
    ev.add_argument("--max-tokens", type=int,
                    help="default: 24 with --cases (scoring reads the first line only); with --benchmark the "
                         "editors' default (settings.default_max_tokens)")
    ev.add_argument("--peer-server", type=Path, metavar="LLAMA_SERVER",
                    help="--benchmark: also ask this llama-server binary, same model file, plain FIM prompt "
                         "(`make peer` builds it from the pinned llama.cpp and prints its path)")
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
    be.add_argument("--accept-pause", type=float, default=1.0,
                    help="accept scenario: seconds from a suggestion shown to its accept (reading it, Tab)")
    be.add_argument("--mode", choices=["baseline", "optimized", "both"], default="both")
    be.add_argument("--features", default="", help="optimized mode's switches, as for eval: --features=-prefix_cache")
    be.add_argument("--peer-server", type=Path, metavar="LLAMA_SERVER",
                    help="typing: replay the session against this llama-server binary too, asked as llama.vscode "
                         "asks (same model file; see ctxpress/evaluation/peer.py); `make peer` builds it from the "
                         "pinned llama.cpp and prints its path")
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
                    help="jump: a prompt layout to compare, e.g. today:-steady_excerpts (repeatable; the same cursors "
                         "for each, in the order given)")
    be.add_argument("--jump-rest-ms", type=int, default=0, metavar="MS",
                    help="jump: before each request the cursor rests at its place this long (file_opened with the "
                         "cursor, as the VS Code extension's ctxpress/cursorRest), e.g. 1000; 0: a cold jump")
    be.add_argument("--kernel-paths",
                    help="kernels: the CPU kernel paths to measure, each in a process of its own (a path the host "
                         "cannot run, or the build does not hold, is reported, not run; default: auto,amx,avx512,avx2 "
                         "where llama.cpp holds every variant, auto where `make install` built it for this host)")
    be.add_argument("--baseline-python", metavar="PYTHON",
                    help="kernels: measure this Python's llama.cpp build too, as `today`, the baseline of the ratios "
                         "(default baseline: auto)")
    be.add_argument("--background-load", type=int, default=0, metavar="N",
                    help="keep N cores busy beside the appliance (busy loops, as a compile or a test run would) "
                         "while the benchmark runs: the busy-host figure")
    be.add_argument("--background-nice", type=int, default=10, metavar="NICE",
                    help="the background load's nice level: 10 (default) as a build that lowers its priority, "
                         "0 as a test run started in a terminal")
    be.add_argument("--engine", choices=["scripted", "triton"], default="scripted",
                    help="fairness: the scripted engine (the CPU engine's scheduler, one step at a time; no model) "
                         "or the running appliance's Triton (its CPU engine)")
    be.add_argument("--flood-nice", type=int, default=19, metavar="NICE",
                    help="fairness: the nice level of alice's flooding client: 19 (default) as if it ran on her own "
                         "machine, 0 to have it compete for this host's CPU too")
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
