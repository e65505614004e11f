"""``ctxpress bench``: serving under load and over time, baseline and optimized side by side.

Scenarios (each bounded in requests and seconds):
- ``short``: cursors in short files; ``long``: cursors in files of >= 2,000 lines.
- ``file_switch``: a few files completed in turn, over and over (what a prompt/KV cache pool sees).
- ``concurrency``: N simulated IDE clients with think time, sending at once.
- ``typing``: a function body blanked out and typed back at a human pace; at every pause longer
  than the IDE's debounce a completion is requested and scored against what is typed next.
- ``team``: one appliance shared by a team (optimized mode only): N-1 typists replay typing
  sessions in files of their own while one colleague jumps to cold cursors in other long files.
  What it shows is whether a keystroke waits behind a colleague's cold 1,000-token prompt, so
  it is run once with latency-first admission and once with ``CTXPRESS_BATCHING=false``.
- ``reopen``: one more long file than the engine keeps in memory, each completed once (cold), then
  the first again: its KV has left the pool, so this first request of a reopened file is served
  from the disk tier (or processed anew without it); then once more, warm. Optimized mode only.
- ``kernels``: prompt tokens/s and ms a token per CPU kernel path (AMX / AVX-512 / AVX2, forced), each in
  an engine process of its own, without the appliance (``ctxpress.evaluation.kernel_paths``); runs alone.
- ``accept``: a typist who accepts the suggestions the body goes on with, the editor asking again right after
  each accept (``accept_replay.py``): the requests right after an accept, how fast and how many within 50 ms.
Modes alternate request by request, except in ``typing`` and ``file_switch``, where each mode
replays the whole session in turn: there the engine's cache state across requests is what is
measured, and interleaving would let one mode evict the other's cache.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ctxpress.client import CompletionClient
from ctxpress.evaluation.accept_replay import AFTER_ACCEPT, TYPED, accept_figures, replay_accepting
from ctxpress.evaluation.bench_config import BenchConfig
from ctxpress.evaluation.bench_report import Sample, summarise
from ctxpress.evaluation.cases import Case, cut_out, make_cases
from ctxpress.evaluation.progress import Progress
from ctxpress.evaluation.scenarios import SCENARIOS
from ctxpress.evaluation.typing_replay import (
    TypingStep,
    replay_typing,
    step_request,
    suggestion_matches,
    typing_plan,
)
from ctxpress_core.wire.v1 import CompletionRequest, FileOpened

REOPEN_LABELS = ("cold", "reopened", "warm")
# The team scenario's typists: long SQLAlchemy files, each with a function of 6-30 lines to type.
TEAM_FILES = ("engine/result.py", "sql/operators.py", "orm/attributes.py", "orm/session.py", "sql/elements.py",
              "orm/query.py", "sql/schema.py")


def third_party_root() -> Path:
    import sqlalchemy

    assert sqlalchemy.__file__ is not None
    return Path(sqlalchemy.__file__).parent


def _request(case: Case, text: str, mode: str, scenario: str, max_tokens: int,
             features: dict[str, bool] | None = None) -> CompletionRequest:
    return CompletionRequest(repository=Path(case.repo).name, path=case.path, text=text, line=case.line,
                             column=case.column, max_tokens=max_tokens, mode=mode,  # type: ignore[arg-type]
                             scenario=f"bench-{scenario}", features=features if mode == "optimized" else None)


async def _send(client: CompletionClient, request: CompletionRequest) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    reply = await client.complete(request)
    return (time.perf_counter() - started) * 1000, reply


async def _open(client: CompletionClient, case: Case, text: str, features: dict[str, bool] | None) -> None:
    # as an IDE does, with the cursor where the developer will type (the engine may pre-warm it) and the switches
    # its requests will carry
    await client.file_opened(FileOpened(repository=Path(case.repo).name, path=case.path, text=text,
                                        line=case.line, column=case.column, features=features))


async def _cases_scenario(client: CompletionClient, name: str, cases: Sequence[Case], cfg: BenchConfig,
                          progress: Progress, interleave: bool, rounds: int = 1) -> list[Sample]:
    samples: list[Sample] = []
    deadline = time.monotonic() + cfg.max_seconds
    texts = {c.path: (Path(c.repo) / c.path).read_text(encoding="utf-8") for c in cases}
    for case in cases:
        await _open(client, case, texts[case.path], cfg.features)
    order = ([(r, c, m) for r in range(rounds) for c in cases for m in cfg.modes] if interleave
             else [(r, c, m) for m in cfg.modes for r in range(rounds) for c in cases])
    for _, case, mode in order:
        if time.monotonic() > deadline:
            break
        cut, _ = cut_out(texts[case.path], case.line, case.column)
        latency, reply = await _send(client, _request(case, cut, mode, name, cfg.max_tokens, cfg.features))
        samples.append(Sample(mode, latency, reply))
        progress.advance(f"{name} {mode} {latency:.0f} ms")
    return samples


async def _concurrency(cfg: BenchConfig, cases: Sequence[Case], progress: Progress) -> list[Sample]:
    samples: list[Sample] = []
    deadline = time.monotonic() + cfg.max_seconds
    rng = random.Random(cfg.seed)

    async def ide(index: int) -> None:
        async with CompletionClient(cfg.nats_url, cfg.subject) as client:
            for round_ in range(cfg.requests):
                if time.monotonic() > deadline:
                    return
                case = cases[(index + round_) % len(cases)]
                text = (Path(case.repo) / case.path).read_text(encoding="utf-8")
                cut, _ = cut_out(text, case.line, case.column)
                mode = cfg.modes[(index + round_) % len(cfg.modes)]
                latency, reply = await _send(client, _request(case, cut, mode, "concurrency", cfg.max_tokens,
                                                              cfg.features))
                samples.append(Sample(mode, latency, reply))
                progress.advance(f"concurrency {mode} {latency:.0f} ms")
                await asyncio.sleep(cfg.think_s * (0.5 + rng.random()))

    await asyncio.gather(*(ide(i) for i in range(cfg.clients)))
    return samples


async def _typing(client: CompletionClient, path: Path, cfg: BenchConfig, progress: Progress) -> list[Sample]:
    opened, open_line, steps = await asyncio.to_thread(typing_plan, path, cfg)
    repository = path.parent.name
    samples: list[Sample] = []
    for mode in cfg.modes:  # a whole replay per mode: the cache between keystrokes is the point
        # The IDE knows where the cursor is when the file opens: where the typist is about to start.
        await client.file_opened(FileOpened(repository=repository, path=path.name, text=opened,
                                            line=open_line, column=0))

        async def send(step: TypingStep, mode: str = mode) -> tuple[float, dict[str, Any]]:
            return await _send(client, step_request(repository, path.name, step, mode, "typing", cfg))

        samples += await replay_typing(steps, cfg, send, progress, mode)
    return samples


def team_typists(clients: int) -> int:
    """The team scenario's typists: every client but the one jumping to cold cursors (at least one)."""
    return max(1, clients - 1)


async def _team(cfg: BenchConfig, root: Path, progress: Progress) -> list[Sample]:
    """``cfg.clients - 1`` typists, each replaying a typing session in a file of its own, and one
    colleague asking at cold cursors in other long files (think time between), all at once until
    the typists are done. Samples are labelled ``typing`` (a typist's requests after its first),
    ``typing_cold`` (each typist's first request: its file's prompt is not cached yet) and
    ``jump``."""
    typists = team_typists(cfg.clients)
    if typists > len(TEAM_FILES):
        raise ValueError(f"the team scenario has files for {len(TEAM_FILES)} typists: --clients {len(TEAM_FILES) + 1} "
                         "at most")
    paths = [root / f for f in TEAM_FILES[:typists]]
    plans = await asyncio.gather(*(asyncio.to_thread(typing_plan, path, cfg) for path in paths))
    jumps = [c for c in make_cases(root, 40, cfg.seed, min_lines=2000) if c.path not in TEAM_FILES[:typists]]
    if not jumps:
        raise ValueError("no long files outside the typists' for the jumping client")
    samples: list[Sample] = []
    typing_done = asyncio.Event()
    remaining = [typists]
    rng = random.Random(cfg.seed)

    async def typist(path: Path, opened: str, open_line: int, steps: list[TypingStep]) -> None:
        repository, name = root.name, str(path.relative_to(root))  # as the jumping client names files
        async with CompletionClient(cfg.nats_url, cfg.subject) as client:
            await client.file_opened(FileOpened(repository=repository, path=name, text=opened, line=open_line,
                                                column=0))

            async def send(step: TypingStep) -> tuple[float, dict[str, Any]]:
                return await _send(client, step_request(repository, name, step, "optimized", "team", cfg))

            replay = await replay_typing(steps, cfg, send, progress, "typing")
        if replay:
            replay[0].mode = "typing_cold"
        samples.extend(replay)
        remaining[0] -= 1
        if not remaining[0]:
            typing_done.set()

    async def jumper() -> None:
        async with CompletionClient(cfg.nats_url, cfg.subject) as client:
            for i in itertools.count():
                if typing_done.is_set():
                    return
                case = jumps[i % len(jumps)]
                text = (Path(case.repo) / case.path).read_text(encoding="utf-8")
                cut, _ = cut_out(text, case.line, case.column)
                latency, reply = await _send(client, _request(case, cut, "optimized", "team", cfg.max_tokens,
                                                              cfg.features))
                samples.append(Sample("jump", latency, reply))
                progress.note(f"team jump {latency:.0f} ms")  # not counted: the typists bound the scenario
                await asyncio.sleep(cfg.think_s * (0.5 + rng.random()))

    await asyncio.gather(jumper(), *(typist(path, *plan) for path, plan in zip(paths, plans, strict=True)))
    return samples


async def _reopen(client: CompletionClient, cases: Sequence[Case], cfg: BenchConfig,
                  progress: Progress) -> list[Sample]:
    samples: list[Sample] = []
    texts = {c.path: cut_out((Path(c.repo) / c.path).read_text(encoding="utf-8"), c.line, c.column)[0]
             for c in cases}
    visits = [("cold", c) for c in cases] + [("reopened", cases[0]), ("warm", cases[0])]
    for label, case in visits:
        latency, reply = await _send(client, _request(case, texts[case.path], "optimized", "reopen",
                                                      cfg.max_tokens, cfg.features))
        samples.append(Sample(label, latency, reply))
        restored = reply.get("context", {}).get("restored_tokens") or 0
        progress.advance(f"reopen {label} {case.path} {latency:.0f} ms, {restored} tokens read back from disk")
    return samples


def jump_cursors(path: Path, cfg: BenchConfig) -> list[Case]:
    """Cursors in ``cfg.jump_cursors`` different functions of ``path``, in the order a reader moving around the file
    visits them (seeded): one eval case (a line's rest to complete) per function."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = sorted((node.lineno - 1, (node.end_lineno or node.lineno) - 1) for node in ast.walk(tree)
                       if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))
    picked: dict[tuple[int, int], Case] = {}
    for case in make_cases(path.parent, 40 * cfg.jump_cursors, cfg.seed):
        if case.path != path.name:
            continue
        inner = [f for f in functions if f[0] < case.line <= f[1]]
        if inner:  # the innermost function holding the cursor; one cursor per function
            picked.setdefault(max(inner), case)
    cases = list(picked.values())
    random.Random(cfg.seed).shuffle(cases)
    return cases[:cfg.jump_cursors]


async def _jump(client: CompletionClient, path: Path, cfg: BenchConfig, progress: Progress) -> list[Sample]:
    """A developer reading and editing one long file: open it, then complete in one function after another, with
    reading time between (and with ``cfg.jump_rest_s``, the cursor said to rest at each place that long before the
    request: the latency after a click and a second of reading). Per feature set of ``cfg.jump_layouts`` (the
    prompt layouts compared), same cursors."""
    cases = await asyncio.to_thread(jump_cursors, path, cfg)
    if not cases:
        raise ValueError(f"{path}: no cursor in a function (the jump scenario needs a Python file with functions)")
    text = await asyncio.to_thread(path.read_text, encoding="utf-8")
    samples: list[Sample] = []
    layouts = cfg.jump_layouts or (("optimized", cfg.features),)
    for label, features in layouts:
        # each layout's requests under a repository name of its own: nothing one left in the engine's cache (a
        # file's KV is keyed by repository and path) serves the next
        named = [replace(c, repo=f"{c.repo}@{label}") for c in cases] if len(layouts) > 1 else cases
        await _open(client, named[0], text, features)
        for case in named:
            cut, _ = cut_out(text, case.line, case.column)
            if cfg.jump_rest_s > 0:  # the cursor rests there first (a click, then reading), as VS Code tells it
                await _open(client, case, cut, features)
                await asyncio.sleep(cfg.jump_rest_s)
            latency, reply = await _send(client, _request(case, cut, "optimized", "jump", cfg.max_tokens, features))
            samples.append(Sample(label, latency, reply, suggestion_matches(reply.get("completion", ""),
                                                                            case.expected)))
            progress.advance(f"jump {label} line {case.line + 1} {latency:.0f} ms")
            await asyncio.sleep(cfg.jump_think_s)
    return samples


ACCEPT_LABELS = (TYPED, AFTER_ACCEPT)


async def _accept(client: CompletionClient, path: Path, cfg: BenchConfig, progress: Progress) -> list[Sample]:
    """A typist who accepts what matches (in a file of its own, so that no other scenario's engine cache serves it)."""
    name = f"accept-{path.name}"

    async def send(text: str, line: int, column: int) -> tuple[float, dict[str, Any]]:
        return await _send(client, CompletionRequest(
            repository=path.parent.name, path=name, text=text, line=line, column=column,
            max_tokens=cfg.max_tokens, mode="optimized", scenario="bench-accept", features=cfg.features))

    return await replay_accepting(path, cfg, send, progress)


async def run_bench(cfg: BenchConfig, scenarios: Sequence[str], typing_file: Path | None = None,
                    files: Sequence[Path] = ()) -> dict[str, dict[str, dict[str, Any]]]:
    root = third_party_root()
    results: dict[str, dict[str, dict[str, Any]]] = {}
    sizes = {"short": cfg.requests, "long": cfg.requests, "file_switch": 3 * 2,
             "concurrency": cfg.clients * cfg.requests, "typing": cfg.typing_pauses,
             "team": team_typists(cfg.clients) * cfg.typing_pauses, "reopen": cfg.kv_pool_slots + 3,
             "jump": cfg.jump_cursors * max(1, len(cfg.jump_layouts)), "accept": cfg.typing_pauses}
    one_run = ("concurrency", "team", "reopen", "jump", "accept")  # not once per mode
    progress = Progress(sum(sizes[s] * (1 if s in one_run else len(cfg.modes)) for s in scenarios),
                        "bench")

    def cases_for(min_lines: int, max_lines: int, n: int) -> list[Case]:
        if files:  # cursors from the given files only, whatever their length
            picked = [c for f in files for c in make_cases(f.parent, 10 * n, cfg.seed) if c.path == f.name]
            return picked[:n]
        return make_cases(root, n, cfg.seed, min_lines=min_lines, max_lines=max_lines)

    async with CompletionClient(cfg.nats_url, cfg.subject) as client:
        for name in scenarios:
            started = time.monotonic()
            if name == "short":
                samples = await _cases_scenario(client, name, cases_for(0, 300, cfg.requests), cfg, progress, True)
            elif name == "long":
                samples = await _cases_scenario(client, name, cases_for(2000, 0, cfg.requests), cfg, progress, True)
            elif name == "file_switch":
                picked = cases_for(300, 0, 3)
                samples = await _cases_scenario(client, name, picked, cfg, progress, False, rounds=2)
            elif name == "concurrency":
                samples = await _concurrency(cfg, cases_for(0, 600, cfg.clients * 2), progress)
            elif name == "typing":
                path = typing_file or root / "engine" / "result.py"
                samples = await _typing(client, path, cfg, progress)
            elif name == "team":
                samples = await _team(cfg, root, progress)
            elif name == "jump":
                samples = await _jump(client, typing_file or root / "engine" / "result.py", cfg, progress)
            elif name == "accept":
                samples = await _accept(client, typing_file or root / "engine" / "result.py", cfg, progress)
            elif name == "reopen":
                picked = {c.path: c for c in cases_for(1000, 0, 8 * (cfg.kv_pool_slots + 1))}
                samples = await _reopen(client, list(picked.values())[:cfg.kv_pool_slots + 1], cfg, progress)
            else:
                raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
            seconds = time.monotonic() - started
            shared = seconds if name in ("concurrency", "team") else None
            labels = {"team": ("typing", "typing_cold", "jump"), "reopen": REOPEN_LABELS, "accept": ACCEPT_LABELS,
                      "jump": [label for label, _ in cfg.jump_layouts] or ["optimized"]}.get(name, cfg.modes)
            results[name] = {label: summarise([s for s in samples if s.mode == label], shared) for label in labels}
            if name == "team":
                results[name]["all"] = summarise(samples, shared)
            if name == "accept":
                results[name][AFTER_ACCEPT].update(accept_figures(samples))
            if name == "reopen" and results[name]["warm"]["latency_ms_p50"]:
                warm = results[name]["warm"]["latency_ms_p50"]
                results[name]["reopened"]["vs_warm"] = results[name]["reopened"]["latency_ms_p50"] / warm
                results[name]["cold"]["vs_warm"] = results[name]["cold"]["latency_ms_p50"] / warm
    return results
