"""``ctxpress bench``: the scenarios asked for (bench.py), the ones that run alone (``load``, ``shards``,
``kernels``), and the typing replay asked of a peer server or through an editor's door (``--peer-server``,
``--via``). Its arguments are in cli.py."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from ctxpress_core.settings import Settings


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
    from serving.weights import model_path

    model = model_path(settings)
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
                      typing_pauses=args.typing_pauses, accept_pause_s=args.accept_pause, features=features,
                      kv_pool_slots=settings.kv_pool_slots, jump_layouts=layouts, jump_rest_s=args.jump_rest_ms / 1000)
    scenarios = args.scenario or list(DEFAULT_SCENARIOS)
    if "host" in scenarios:
        if scenarios != ["host"]:
            print("error: --scenario host runs alone (it runs kernels, typing, jump, accept and load itself)",
                  file=sys.stderr)
            return 2
        return _host(args)
    if "shards" in scenarios:
        if scenarios != ["shards"]:
            print("error: --scenario shards runs alone (it starts a topology of its own)", file=sys.stderr)
            return 2
        return _shards(settings)
    if "fairness" in scenarios:
        if scenarios != ["fairness"]:
            print("error: --scenario fairness runs alone (it starts a team appliance of its own)", file=sys.stderr)
            return 2
        from ctxpress.evaluation.bench import third_party_root
        from ctxpress.evaluation.fairness_bench import main as fairness

        return fairness(cfg, next(iter(args.file), third_party_root() / "engine" / "result.py"), args.engine,
                        settings, args.flood_nice)
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
            try:
                results["typing"]["peer"] = asyncio.run(_peer_typing(args.peer_server, typing_file, cfg, settings))
            except (OSError, RuntimeError) as exc:  # the peer's failure is the peer's: ours are still reported
                print(f"error: the peer: {exc}", file=sys.stderr)
                results["typing"]["peer"] = {"error": str(exc)[:500]}
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
    from serving.weights import model_path

    model = model_path(settings)
    path = typing_file or third_party_root() / "engine" / "result.py"
    progress = Progress(cfg.typing_pauses, "peer")
    samples = await peer_typing(binary, Path(model), path, cfg, progress, threads=os.cpu_count() or 2)
    return summarise(samples)


def _host(args: argparse.Namespace) -> int:
    """This host's figures beside the goals, in one run (ctxpress.evaluation.host_report)."""
    from ctxpress.evaluation.host_report import final_line, report_lines, run_host

    if args.peer_server is not None and not args.peer_server.is_file():
        print(f"error: --peer-server {args.peer_server}: no such file", file=sys.stderr)
        return 2
    parts, rows = run_host(args)
    for line in report_lines(rows):
        print(line)
    print(final_line(parts, rows))
    return 1 if any(p.error for p in parts) else 0


def _kernels(args: argparse.Namespace, settings: Settings) -> int:
    """Prompt and decode speed per CPU kernel path (ctxpress.evaluation.kernel_paths), without the appliance."""
    from ctxpress.evaluation.kernel_paths import run
    from serving.weights import model_path

    model = model_path(settings)
    figures = argparse.Namespace(model=Path(model), paths=args.kernel_paths,
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
