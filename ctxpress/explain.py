"""`explain FILE --line L --column C`: print the context report (what was chosen and why, what was dropped)
and the assembled prompt.

Run by ``ctxpress explain`` in its own process: the context library sits beneath the application.
Lines and columns are 0-based, as in ``ctxpress complete`` and the wire format.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from context.assembly import in_file_context
from context.model import AssembledContext, ContextBlock
from context.options import AssemblyOptions
from context.packing.tokens import rough_token_count
from ctxpress_core.languages import normalize_language
from ctxpress_core.settings import get_settings


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ctxpress explain", description=__doc__)
    p.add_argument("file", type=Path)
    p.add_argument("--line", type=int, required=True, help="0-based line of the cursor")
    p.add_argument("--column", type=int, default=0, help="0-based column (characters) of the cursor")
    p.add_argument("--budget", type=int, default=get_settings().context_budget_tokens,
                   help="context budget in tokens (default CTXPRESS_CONTEXT_BUDGET_TOKENS)")
    p.add_argument("--language", default=None, help="override language detection")
    p.add_argument("--edited", action="append", default=[], metavar="START-END",
                   help="0-based recently edited line range, inclusive (repeatable)")
    p.add_argument("--git", action="store_true", help="add lines changed since HEAD (git diff) as recent edits")
    p.add_argument("--timeout-ms", type=float, default=1000.0,
                   help="assembly timeout (generous by default: a cold CLI run parses from scratch)")
    return p


def main(argv: Sequence[str] | None = None, count_tokens: Callable[[str], int] | None = None) -> int:
    args = build_parser().parse_args(argv)
    text = args.file.read_text(encoding="utf-8", errors="replace")
    edits: list[tuple[int, int]] = []
    for spec in args.edited:
        a, _, b = spec.partition("-")
        edits.append((int(a), int(b or a)))
    if args.git:
        from indexer.changes import changed_line_ranges

        root = _git_root(args.file)
        if root is not None:
            edits += changed_line_ranges(root, args.file.resolve())
    language = normalize_language(args.language) if args.language else None
    options = AssemblyOptions(budget_tokens=args.budget, language=language, recent_edit_lines=edits,
                              timeout_ms=args.timeout_ms, exact_file_tokens=True)
    ctx = in_file_context(text, str(args.file), args.line, args.column,
                          count_tokens=count_tokens or rough_token_count, options=options)
    sys.stdout.write(explain(ctx) + "\n")
    return 0


def explain(ctx: AssembledContext) -> str:
    """Human-readable context report: what was chosen and why, what was dropped, and the prompt."""
    out: list[str] = []
    ratio = f"{ctx.compression_ratio:.1f}:1" if ctx.context_tokens else "n/a"
    out.append(f"context for {ctx.path or '<text>'} at line {ctx.line + 1}, column {ctx.column + 1} "
               f"(language: {ctx.language or 'unknown'})")
    out.append(f"strategy: {ctx.strategy}" + (f" (fallback: {ctx.fallback_reason})" if ctx.fallback_reason else ""))
    approx = "" if ctx.file_tokens_exact else "~"
    out.append(f"tokens: {ctx.context_tokens} of budget {ctx.budget_tokens}; file {approx}{ctx.file_tokens} tokens "
               f"in {ctx.file_lines} lines; compression {ratio}; assembled in {ctx.elapsed_ms:.1f} ms")
    if ctx.timings_ms:
        out.append("stages: " + ", ".join(f"{k} {v:.1f} ms" for k, v in ctx.timings_ms.items()))
    out.append("")

    def table(title: str, rows: list[ContextBlock]) -> None:
        out.append(f"{title} ({len(rows)}):")
        if not rows:
            out.append("  (none)")
        for i, b in enumerate(rows, 1):
            out.append(f"  {i:>2}. {b.kind:<11} {b.name:<36} lines {b.start_line + 1}-{b.end_line + 1}  "
                       f"{b.form:<7} {b.tokens:>5} tok  {b.reason}")

    table("chosen", ctx.blocks)
    table("dropped for the budget", ctx.dropped)
    out.append("")
    out.append("----- prompt prefix (ends at the cursor) -----")
    out.append(ctx.prefix + "<CURSOR>")
    out.append("----- prompt suffix -----")
    out.append(ctx.suffix)
    out.append("----- end -----")
    return "\n".join(out)


def _git_root(path: Path) -> Path | None:
    for parent in [path.resolve().parent, *path.resolve().parents]:
        if (parent / ".git").exists():
            return parent
    return None


def model_token_counter() -> Callable[[str], int]:
    """The served model's own tokenizer, so the report counts what the model will see."""
    from ctxpress_core.settings import get_settings
    from serving.tokenizer import Tokenizer
    from serving.weights import model_path

    return Tokenizer(model_path(get_settings())).count
