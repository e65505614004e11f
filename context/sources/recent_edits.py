"""Blocks the user changed recently: ``git diff`` against HEAD and the IDE's own edit ranges.

Ranges come first-most-recent (the caller orders them); each maps to the innermost extracted
block it touches. An edit outside any block (module-level statements) is shown as its lines.
"""

from __future__ import annotations

from collections.abc import Sequence

from context.packing.blocks import symbol_candidate
from context.packing.pack import TIER_RECENT_EDIT, Candidate, Form, Piece
from syntax.summaries import Outline
from syntax.symbols.model import DECLARATION_KINDS, FileSymbols, Symbol

MAX_LOOSE_EDIT_LINES = 20


def _innermost_overlapping(table: FileSymbols, start: int, end: int) -> Symbol | None:
    best: Symbol | None = None
    for s in table.symbols:
        if s.start_line <= end and start <= s.end_line and s.kind not in DECLARATION_KINDS:
            if best is None or (s.end_line - s.start_line) < (best.end_line - best.start_line):
                best = s
    return best


def recent_edit_candidates(
    outline: Outline, ranges: Sequence[tuple[int, int]], cursor_line: int
) -> list[Candidate]:
    out: list[Candidate] = []
    seen: set[int] = set()
    table, parsed = outline.table, outline.parsed
    for order, (start, end) in enumerate(ranges):
        start, end = max(0, min(start, end)), max(start, end)
        if start >= parsed.line_count:
            continue
        if start <= cursor_line <= end:
            continue  # the edit being typed is the enclosing block's business
        sym = _innermost_overlapping(table, start, end)
        if sym is not None:
            if sym.index in seen or sym.contains_line(cursor_line):
                continue
            seen.add(sym.index)
            out.append(symbol_candidate(outline, sym, tier=TIER_RECENT_EDIT, rank=order,
                                        reason=f"recently modified (lines {start + 1}-{end + 1})"))
            continue
        end = min(end, start + MAX_LOOSE_EDIT_LINES - 1, parsed.line_count - 1)
        text = parsed.lines_text(start, end)
        if not text.strip():
            continue
        out.append(Candidate(
            kind="lines", name=f"edit@{start + 1}", start_line=start, end_line=end, tier=TIER_RECENT_EDIT,
            rank=order, reason=f"recently modified (lines {start + 1}-{end + 1}, outside any block)",
            forms=[Form("whole", [Piece(start, end, text, verbatim=True)])], key=f"lines:{start}-{end}",
        ))
    return out
