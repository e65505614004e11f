"""Signatures of the blocks next to the enclosing one (lowest priority, fills leftover budget).

Sibling methods of the enclosing class tell the model what ``self.`` can call; the nearest
siblings come first. Only summaries: their bodies were not referenced.
"""

from __future__ import annotations

from context.packing.blocks import symbol_candidate
from context.packing.pack import TIER_NEIGHBOURS, Candidate
from syntax.summaries import Outline
from syntax.symbols.model import CLASS_KINDS, FUNCTION_KINDS, Symbol

MAX_NEIGHBOURS = 12


def neighbour_candidates(
    outline: Outline, cursor_line: int, enclosing: Symbol | None, exclude: set[int]
) -> list[Candidate]:
    table = outline.table
    if enclosing is not None and enclosing.owner:
        pool = [s for s in table.symbols if s.owner == enclosing.owner and s.kind in FUNCTION_KINDS]
    else:
        pool = [s for s in table.top_level() if s.kind in FUNCTION_KINDS | CLASS_KINDS]
    pool = [s for s in pool if s.index not in exclude and not s.contains_line(cursor_line)]
    pool.sort(key=lambda s: min(abs(s.start_line - cursor_line), abs(s.end_line - cursor_line)))
    out = []
    for rank, sym in enumerate(pool[:MAX_NEIGHBOURS]):
        out.append(symbol_candidate(outline, sym, tier=TIER_NEIGHBOURS, rank=rank,
                                    reason="defined next to the enclosing block (signature only)",
                                    allow_whole=False))
    return out
