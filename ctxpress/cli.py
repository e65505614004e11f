"""The ``ctxpress`` command."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

from ctxpress_core.settings import Settings, get_settings


def _cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    from ctxpress.parts.base import StartError
    from ctxpress.parts.lifecycle import up

    print(f"ctxpress up (state in {settings.state_dir})")
    started = time.perf_counter()
    try:
        timings = up(settings)
    except StartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"all parts ready in {time.perf_counter() - started:.1f}s "
          f"({', '.join(f'{k} {v:.1f}s' for k, v in timings.items())})")
    return 0


def _cmd_down(args: argparse.Namespace, settings: Settings) -> int:
    from ctxpress.parts.lifecycle import down

    failed = down(settings)
    if failed:
        print(f"stopped all but {', '.join(failed)}", file=sys.stderr)
        return 1
    print("all parts stopped")
    return 0


def _cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    from ctxpress.parts import parts
    from ctxpress.parts.supervisor import SupervisorPart, describe, read_state

    rows = [part.status() for part in [*parts(settings), SupervisorPart(settings)]]
    # Restarts only while the supervisor runs: its file is otherwise what an earlier one left behind.
    restarts = read_state(settings).get("parts", {}) if rows[-1].running else {}
    model = settings.model_path.name if settings.model_path else f"{settings.model_name} (packaged GGUF)"
    if args.json:
        print(json.dumps({"parts": [{**row.__dict__, "supervision": restarts.get(row.name)} for row in rows],
                          "model": model}, indent=2))
    else:
        now = time.time()
        for row in rows:
            state = "running" if row.running else "stopped"
            kind = "external" if row.external else (f"pid {row.pid}" if row.pid else "")
            print(f"  {row.name:<18} {state:<8} {kind:<12} {row.address}")
            for detail in (row.detail, describe(restarts.get(row.name) or {}, now)):
                if detail:
                    print(f"  {'':<18} {detail}")
        print(f"  model: {model}; Triton metrics: {settings.metrics_url()}")
    return 0 if all(row.running for row in rows) else 3


def _cmd_complete(args: argparse.Namespace, settings: Settings) -> int:
    from ctxpress.client import CompletionClient, request_for_file

    request = request_for_file(Path(args.file), args.line, args.column, max_tokens=args.max_tokens, mode=args.mode)
    url, subject, options = settings.effective_nats_url(), settings.completion_subject, {}
    plaintext = False  # whether a login may go in clear (ctxpress_core.nats_connect): there is none here
    if settings.nats_credentials is not None:  # team mode: as that user, on that user's subject
        from ctxpress_core.identity import TeamConfigError, load_credentials

        try:
            credentials = load_credentials(settings.nats_credentials)
        except TeamConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        url, subject, options = credentials.nats_url, credentials.subject("complete"), credentials.connect_options()
        plaintext = credentials.plaintext

    async def go() -> dict:
        async with CompletionClient(url, subject, connect_options=options, plaintext_credentials=plaintext) as client:
            return await client.complete(request)

    started = time.perf_counter()
    reply = asyncio.run(go())
    wall_ms = (time.perf_counter() - started) * 1000
    if args.json:
        print(json.dumps({**reply, "round_trip_ms": wall_ms}, indent=2))
    elif "error" in reply:
        print(f"error {reply['error']['code']}: {reply['error']['message']}", file=sys.stderr)
    else:
        t = reply["timings"]
        print(reply["completion"])
        print(f"-- {reply['model']} ({reply['mode']}, {reply['finish_reason']}); ms: context {t['context_ms']:.1f}, "
              f"queue {t['queue_ms']:.1f}, prompt {t['prompt_ms']:.0f}, decode {t['decode_ms']:.0f}, "
              f"total {t['total_ms']:.0f}, round trip {wall_ms:.0f}", file=sys.stderr)
    return 1 if "error" in reply else 0


def _cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from ctxpress.demo import default_demo_file, demo
    from ctxpress.parts import parts
    from ctxpress.parts.lifecycle import down, up

    already_up = all(part.status().running for part in parts(settings))
    if not already_up:
        print("Starting the appliance…")
        started = time.perf_counter()
        up(settings)
        print(f"up in {time.perf_counter() - started:.1f}s")
    try:
        results = demo(settings.effective_nats_url(), Path(args.file) if args.file else default_demo_file(), args.n,
                       mode=args.mode, typing=args.typing)
    finally:
        if not already_up and not args.keep:
            print("\nStopping (use --keep to leave it running)…")
            down(settings)
    return 0 if results else 1


def _cmd_lsp(args: argparse.Namespace, settings: Settings) -> int:
    from ctxpress.lsp.stdio import serve

    return serve(settings)


def _cmd_serve_http(args: argparse.Namespace, settings: Settings) -> int:
    from ctxpress.http.app import serve

    return serve(settings, args.host, args.port)


def _cmd_console(args: argparse.Namespace, settings: Settings) -> int:
    from ctxpress.console.app import serve

    return serve(settings, args.host, args.port)


def _explain(argv: list[str]) -> int:
    from ctxpress.explain import main as explain
    from ctxpress.explain import model_token_counter

    return explain(argv, count_tokens=model_token_counter())


_WORKER_MODULES = {"completion": "workers.completion", "index": "workers.index_worker", "gateway": "workers.gateway"}


def _run_worker(args: argparse.Namespace, settings: Settings) -> int:
    # Workers run as their own processes (nothing imports workers): this is what a container runs.
    os.execv(sys.executable, [sys.executable, "-m", _WORKER_MODULES[args.kind]])
    return 0  # not reached


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxpress", description="Self-hosted code completion over NATS")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("up", help="start NATS, PostgreSQL, Triton and the workers").set_defaults(func=_cmd_up)
    sub.add_parser("down", help="stop everything `up` started").set_defaults(func=_cmd_down)
    status = sub.add_parser("status", help="which parts run, where, with which model")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_cmd_status)

    complete = sub.add_parser("complete", help="ask for a completion at a cursor, as an IDE does")
    complete.add_argument("file")
    complete.add_argument("--line", type=int, required=True, help="0-based")
    complete.add_argument("--column", type=int, required=True, help="0-based, in characters")
    complete.add_argument("--max-tokens", type=int, default=64)
    complete.add_argument("--mode", choices=["optimized", "baseline"], default="optimized")
    complete.add_argument("--json", action="store_true")
    complete.set_defaults(func=_cmd_complete)

    demo = sub.add_parser("demo", help="bring everything up and complete a real 2,000-line file")
    demo.add_argument("--file", help="a Python file (default: a 2,000-line third-party module)")
    demo.add_argument("-n", type=int, default=1, help="number of cursors (the first is the file's cold completion)")
    demo.add_argument("--typing", type=int, default=6, metavar="PAUSES",
                      help="then a typing replay in the same file, a completion at each of PAUSES pauses (0: none)")
    demo.add_argument("--keep", action="store_true", help="leave the appliance running afterwards")
    demo.add_argument("--mode", choices=["optimized", "baseline"], default="optimized")
    demo.set_defaults(func=_cmd_demo)

    lsp = sub.add_parser("lsp", help="the language server an editor starts (stdio): inline completion over NATS")
    lsp.add_argument("--stdio", action="store_true", help="accepted for editors that pass it; stdio is the default")
    lsp.set_defaults(func=_cmd_lsp)

    serve_http = sub.add_parser("serve-http", help="HTTP doors for editor plugins: llama.cpp's /infill (llama.vscode, "
                                "llama.vim), Tabby's API, OpenAI/Mistral FIM (Continue)")
    serve_http.add_argument("--host", help="address to listen on (default CTXPRESS_HTTP_HOST, else CTXPRESS_BIND_HOST)")
    serve_http.add_argument("--port", type=int, help="default CTXPRESS_HTTP_PORT (8012, llama.vscode's default)")
    serve_http.set_defaults(func=_cmd_serve_http)

    console = sub.add_parser("console", help="the team console: members, repositories, usage, in a browser "
                             "(`ctxpress up` starts it in team mode)")
    console.add_argument("--host", help="address to listen on (default CTXPRESS_CONSOLE_HOST, 127.0.0.1); beyond "
                                        "loopback it serves HTTPS with the team's certificate")
    console.add_argument("--port", type=int, help="default CTXPRESS_CONSOLE_PORT (8090)")
    console.set_defaults(func=_cmd_console)

    worker = sub.add_parser("worker", help="run one worker in the foreground (what a container runs)")
    worker.add_argument("kind", choices=["completion", "index"])
    worker.set_defaults(func=_run_worker)
    gateway = sub.add_parser("gateway", help="route IDE requests to the shard that holds each file's cache")
    gateway.set_defaults(func=_run_worker, kind="gateway")

    sub.add_parser("explain", help="show the context chosen for a cursor and why (see `ctxpress explain -h`)",
                   add_help=False)

    from build_engines.cli import register as register_build_commands
    from ctxpress.evaluation.cli import register as register_measurement_commands

    register_measurement_commands(sub)

    register_build_commands(sub)
    from ctxpress.index_cli import register as register_index_commands

    register_index_commands(sub)
    from ctxpress.team_cli import register as register_team_commands
    from ctxpress.team_cli import register_deploy

    register_team_commands(sub)
    register_deploy(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["explain"]:
        return _explain(argv[1:])
    if argv[:2] == ["eval", "make-cases"]:
        from ctxpress.evaluation.cli import cmd_make_cases

        return cmd_make_cases(argv[2:])
    args = build_parser().parse_args(argv)
    if args.command in {"build-engines", "triton-repo"}:
        return int(args.func(args))  # they stand alone: no appliance settings
    settings = get_settings()
    try:
        return int(args.func(args, settings))
    except Exception as exc:
        # A part that does not answer is said in one line, whichever command needed it (ctxpress/unavailable.py);
        # anything else keeps its traceback, which is then a bug to report.
        from ctxpress.unavailable import EXIT_PART_DOWN, explain

        line = explain(exc, settings)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return EXIT_PART_DOWN


if __name__ == "__main__":
    raise SystemExit(main())
