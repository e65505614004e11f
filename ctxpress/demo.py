"""``ctxpress demo``: complete a few cursors of a real 2,000-line file, with timings.

The file is third-party code installed with the project (SQLAlchemy's result module),
so nobody here wrote it and the model has no home advantage. Each cursor is placed
mid-line in a function body; the rest of that line is what the developer was about to
type, and it is cut out of the file before the request, exactly as in an evaluation.
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
from ctxpress_core.wire.v1 import CompletionRequest, FileOpened


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
                   report: Callable[[str], None] = print, mode: str = "optimized") -> list[dict]:
    results = []
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
    return results


def demo(nats_url: str, path: Path, count: int, report: Callable[[str], None] = print,
         mode: str = "optimized") -> list[dict]:
    text = path.read_text(encoding="utf-8")
    repository, root = repository_of(path)
    relative = str(path.resolve().relative_to(root)) if path.resolve().is_relative_to(root) else path.name
    cursors = pick_cursors(text, count)
    report(f"\nFile: {path} ({len(text.splitlines())} lines); {len(cursors)} cursors\n")
    return asyncio.run(run_demo(nats_url, repository, relative, text, cursors, report, mode))
