"""``ctxpress eval``: quality and latency on a file of cases (``--cases``), baseline against optimized, or on a
public FIM benchmark (``--benchmark``: HumanEval infilling, scored by its tests). Its arguments are in cli.py."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from ctxpress_core.features import parse_list
from ctxpress_core.settings import Settings


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
    from ctxpress.evaluation.paired import paired_interval
    from ctxpress.evaluation.runner import EvalConfig, ratios, report_lines, run_eval, summarise

    try:
        features = eval_features(args.features)
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
    if args.mode == "both":
        summary["interval"] = {}
        for key in ("exact_match", "edit_similarity"):
            interval = paired_interval(rows["baseline"], rows["optimized"], key)
            if interval is not None:
                summary["interval"][key] = vars(interval)
                print(f"optimized - baseline, {key}: {interval.points:+.1f} points, 95 % interval "
                      f"{interval.low:+.1f} to {interval.high:+.1f} (paired bootstrap over {interval.cases} cases)")
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

    if args.budget or args.gate is not None:
        print("error: --budget and --gate go with --cases", file=sys.stderr)
        return 2
    if args.peer_server is not None and not args.peer_server.is_file():
        print(f"error: --peer-server {args.peer_server}: no such file", file=sys.stderr)
        return 2
    data = args.data or default_data_dir()
    try:
        features = eval_features(args.features)
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
        from serving.weights import model_path

        model = model_path(settings)
    config = BenchmarkConfig(args.benchmark, settings.effective_nats_url(), settings.completion_subject, modes,
                             args.max_tokens or settings.default_max_tokens,
                             peer_server=None if args.canonical else args.peer_server, model=model,
                             peer_threads=os.cpu_count() or 2, test_timeout_s=args.test_timeout,
                             canonical=args.canonical, features=features)
    load_before = _load_average()
    try:
        rows = asyncio.run(run_benchmark(tasks, config, args.out))
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summary = {arm: summarise(arm_rows) for arm, arm_rows in rows.items()}
    selection = (f"seeded sample, seed {args.seed}" if args.limit and args.limit < len(every) else "all")
    meta = {"benchmark": args.benchmark, "n": len(tasks), "total": len(every), "selection": selection,
            "max_tokens": config.max_tokens, "load_before": load_before, "load_after": _load_average(),
            **({"features": config.features} if config.features else {})}
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


def eval_features(spec: str) -> dict[str, bool]:
    """The optimized arm's switches: ``spec``'s, with the latency plan off unless it names it. Every eval case is a
    cursor the appliance has not seen, which a plan answers with a small prompt first (the full one filled in
    behind): the eval scores the steady state a developer gets from the second request there on, and
    ``--features=+plan`` the first suggestion."""
    return {"plan": False, **parse_list(spec)}
