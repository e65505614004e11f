"""``ctxpress demo``: complete a few cursors of a real 2,000-line file, then replay a short stretch of typing in it,
with timings: the cold latency (a file's first completion, nothing of it in the engine's cache) and the warm one
(completions while the developer types, the file's prompt kept in the cache).

The file is third-party code installed with the project (SQLAlchemy's result module),
so nobody here wrote it and the model has no home advantage. Each cursor is placed
mid-line in a function body; the rest of that line is what the developer was about to
type, and it is cut out of the file before the request, exactly as in an evaluation.
The typing replay is the benchmarks' (``ctxpress.evaluation.typing_replay``): a function body removed and typed
back, a completion asked for at each pause, sent as soon as the previous one is answered.
"""

from __future__ import annotations

import ast
import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ctxpress.client import CompletionClient, repository_of
from ctxpress.evaluation.bench_config import BenchConfig
from ctxpress.evaluation.typing_replay import suggestion_matches, typing_plan
from ctxpress_core.wire.v1 import CompletionRequest, FileOpened

TYPING_PAUSES = 6  # completions the typing replay asks for (0: none)


def default_demo_file() -> Path:
    import sqlalchemy.engine.result as module

    assert module.__file__ is not None
    return Path(module.__file__)


@dataclass(frozen=True)
class Cursor:
    line: int
    column: int
    expected: str


def pick_cursors(text: str, count: int) -> list[Cursor]:
    """Cursors spread over the file, each mid-way through a statement in a function body."""
    tree = ast.parse(text)
    lines = text.splitlines()
    candidates: list[Cursor] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for statement in node.body[1:]:  # skip the docstring / first statement
            simple = isinstance(statement, ast.Assign | ast.Return | ast.Expr)
            if not simple or statement.lineno != statement.end_lineno:
                continue
            source = lines[statement.lineno - 1]
            body = source.strip()
            if len(body) < 16 or body.startswith(("#", '"', "'")):
                continue
            indent = len(source) - len(source.lstrip())
            # Cut after the first third of the statement, at a word boundary.
            cut = indent + max(4, len(body) // 3)
            while cut < len(source) and source[cut - 1].isalnum():
                cut += 1
            candidates.append(Cursor(statement.lineno - 1, cut, source[cut:]))
    candidates.sort(key=lambda c: c.line)
    if len(candidates) <= count:
        return candidates
    step = len(candidates) / count
    return [candidates[int(i * step + step / 2)] for i in range(count)]


def cut_out(text: str, cursor: Cursor) -> str:
    """The file as the developer has it: the rest of the cursor line not yet typed."""
    lines = text.splitlines(keepends=True)
    line = lines[cursor.line]
    ending = line[len(line.rstrip("\r\n")):]
    lines[cursor.line] = line[: cursor.column] + ending
    return "".join(lines)


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


async def run_demo(nats_url: str, repository: str, relative: str, text: str, cursors: list[Cursor],
                   report: Callable[[str], None] = print, mode: str = "optimized", path: Path | None = None,
                   typing: int = TYPING_PAUSES) -> list[dict]:
    """The cursors' completions, then (``path`` given, ``typing`` > 0) the typing replay's; each reply with its
    ``wall_ms``, the replay's marked ``typing``."""
    results: list[dict] = []
    async with CompletionClient(nats_url) as client:
        # as an IDE does: the file is opened (and parsed) before anyone types in it
        await client.file_opened(FileOpened(repository=repository, path=relative, text=text))
        for index, cursor in enumerate(cursors, 1):
            request = CompletionRequest(repository=repository, path=relative, text=cut_out(text, cursor),
                                        line=cursor.line, column=cursor.column, max_tokens=32,
                                        mode=mode)  # type: ignore[arg-type]
            started = time.perf_counter()
            reply = await client.complete(request)
            wall_ms = (time.perf_counter() - started) * 1000
            if "error" in reply:
                report(f"[{index}] line {cursor.line + 1}: ERROR {reply['error']['code']}: {reply['error']['message']}")
                continue
            typed = text.splitlines()[cursor.line][: cursor.column]
            t = reply["timings"]
            ctx = reply["context"]
            first = reply["completion"].split("\n", 1)[0]
            match = "exact" if first.strip() == cursor.expected.strip() else "differs"
            report(f"[{index}] line {cursor.line + 1}:  {typed.strip()}⟨cursor⟩")
            report(f"     completion: {first!r}")
            report(f"     expected:   {cursor.expected!r}  ({match})")
            report(f"     timings ms: context {t['context_ms']:.1f}  queue {t['queue_ms']:.1f}  "
                   f"prompt {t['prompt_ms']:.0f}  decode {t['decode_ms']:.0f}  total {t['total_ms']:.0f}  "
                   f"(round trip {wall_ms:.0f})")
            if ctx["strategy"] in ("window", "window-fallback"):
                where = "window" if ctx["window_start_line"] is None else \
                    f"window, lines {ctx['window_start_line'] + 1}-{ctx['window_end_line'] + 1}"
            else:
                kinds = ", ".join(sorted({b["kind"] for b in ctx["blocks"]}))
                where = f"{ctx['strategy']}: {len(ctx['blocks'])} blocks ({kinds})"
            if ctx.get("degraded"):
                where += f"; fell back: {ctx['degraded']}"
            restored = (f" ({ctx['restored_tokens']} read back from disk in {ctx.get('restore_ms') or 0:.0f} ms)"
                        if ctx.get("restored_tokens") else "")
            report(f"     context:    {ctx['context_tokens']} of {ctx['file_tokens']} file tokens sent ({where}), "
                   f"prompt {ctx['prompt_tokens']} tokens, {ctx['cached_tokens']} from cache{restored}\n")
            results.append({**reply, "wall_ms": wall_ms, "exact": match == "exact"})
        if results:
            walls = [r["wall_ms"] for r in results]
            report(f"Summary: {len(results)} completions, {sum(r['exact'] for r in results)} exact; "
                   f"latency median {statistics.median(walls):.0f} ms, p95 {_percentile(walls, 95):.0f} ms")
        replayed = await _typing_replay(client, nats_url, repository, relative, path, mode, typing, report) \
            if path is not None and typing > 0 else []
    for line in latency_summary(results, replayed):
        report(line)
    return results + replayed


async def _typing_replay(client: CompletionClient, nats_url: str, repository: str, relative: str, path: Path,
                         mode: str, pauses: int, report: Callable[[str], None]) -> list[dict]:
    cfg = BenchConfig(nats_url=nats_url, subject="", typing_pauses=pauses)
    try:
        opened, open_line, steps = await asyncio.to_thread(typing_plan, path, cfg)
    except ValueError as exc:
        report(f"\nTyping replay: skipped ({exc})")
        return []
    first, last = steps[0].line, steps[-1].line
    report(f"\nTyping replay: a function body (from line {open_line + 1}) removed and typed back, a completion at "
           f"each of {len(steps)} pauses (lines {first + 1}-{last + 1}), each sent once the last is answered\n")
    await client.file_opened(FileOpened(repository=repository, path=relative, text=opened, line=open_line, column=0))
    typed: list[dict] = []
    for index, step in enumerate(steps, 1):
        started = time.perf_counter()
        reply = await client.complete(CompletionRequest(repository=repository, path=relative, text=step.text,
                                                        line=step.line, column=step.column, max_tokens=cfg.max_tokens,
                                                        mode=mode))  # type: ignore[arg-type]
        wall_ms = (time.perf_counter() - started) * 1000
        if "error" in reply:
            report(f"[t{index}] ERROR {reply['error']['code']}: {reply['error']['message']}")
            continue
        ctx = reply["context"]
        matched = suggestion_matches(reply["completion"], step.next_text)
        report(f"[t{index}] line {step.line + 1}: {wall_ms:>6.0f} ms  prompt {ctx['prompt_tokens']} tokens, "
               f"{ctx['cached_tokens']} from cache  {reply['completion'].split(chr(10), 1)[0]!r}  "
               f"({'typed next' if matched else 'differs'})")
        typed.append({**reply, "wall_ms": wall_ms, "typing": True, "matched": matched})
    return typed


def latency_summary(cold: list[dict], typing: list[dict]) -> list[str]:
    """Cold against warm: the file's first completion (nothing of it in the cache yet), and the typing replay's
    completions after its first (which is cold again: the file changed, a function body removed)."""
    lines = ["", "Latency"]
    first = cold[0] if cold else typing[0] if typing else None
    if first is None:
        return []
    ctx = first.get("context", {})
    lines.append(f"  cold: the file's first completion {first['wall_ms']:,.0f} ms "
                 f"({ctx.get('prompt_tokens', 0):,} prompt tokens, {ctx.get('cached_tokens', 0):,} from cache)")
    warm = typing[1:]
    if warm:
        walls = [r["wall_ms"] for r in warm]
        prompt = sum(r.get("context", {}).get("prompt_tokens", 0) for r in warm)
        cached = sum(r.get("context", {}).get("cached_tokens", 0) for r in warm)
        share = f"; {100 * cached / prompt:.0f} % of prompt tokens from cache" if prompt else ""
        median = statistics.median(walls)
        lines.append(f"  warm: while typing, {len(warm)} completions after the replay's first "
                     f"({typing[0]['wall_ms']:,.0f} ms): median {median:,.0f} ms, "
                     f"p95 {_percentile(walls, 95):,.0f} ms{share}")
        lines.append(f"  {sum(bool(r.get('matched')) for r in typing)} of {len(typing)} typing suggestions were what "
                     f"was typed next; warm is {first['wall_ms'] / max(median, 1):.1f}x faster than cold")
    return lines


def demo(nats_url: str, path: Path, count: int, report: Callable[[str], None] = print,
         mode: str = "optimized", typing: int = TYPING_PAUSES) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    repository, root = repository_of(path)
    relative = str(path.resolve().relative_to(root)) if path.resolve().is_relative_to(root) else path.name
    cursors = pick_cursors(text, count)
    report(f"\nFile: {path} ({len(text.splitlines())} lines); {len(cursors)} cursors\n")
    return asyncio.run(run_demo(nats_url, repository, relative, text, cursors, report, mode, path, typing))
