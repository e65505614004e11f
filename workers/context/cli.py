"""`explain FILE --line L --column C`: print the context report and the assembled prompt.

Run by ``ctxpress explain`` as ``python -m workers.context.cli`` (nothing imports workers).
Lines and columns are 0-based, as in ``ctxpress complete`` and the wire format.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ctxpress.core.settings import get_settings
from workers.context.assemble import assemble_context, explain
from workers.context.tokens import rough_token_count


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
    ctx = assemble_context(
        text, str(args.file), args.line, args.column, count_tokens=count_tokens or rough_token_count,
        budget_tokens=args.budget, language=args.language, recent_edit_lines=edits, timeout_ms=args.timeout_ms,
        exact_file_tokens=True,
    )
    sys.stdout.write(explain(ctx) + "\n")
    return 0


def _git_root(path: Path) -> Path | None:
    for parent in [path.resolve().parent, *path.resolve().parents]:
        if (parent / ".git").exists():
            return parent
    return None


def _model_token_counter() -> Callable[[str], int]:
    """The served model's own tokenizer, so the report counts what the model will see."""
    from ctxpress.core.settings import get_settings
    from serving.tokenizer import Tokenizer
    from serving.weights import TARGET, ensure_model

    settings = get_settings()
    return Tokenizer(settings.model_path or ensure_model(TARGET, settings.models_dir)).count


if __name__ == "__main__":
    raise SystemExit(main(count_tokens=_model_token_counter()))
