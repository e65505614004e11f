"""Imports and module constants, reduced to names and aliases.

They are cheap and tell the model which names exist; when they do not all fit, the imports
whose names appear near the cursor are kept (the others are reported as dropped).
"""

from __future__ import annotations

import re

from context.packing.pack import TIER_IMPORTS, Candidate, Form, Piece
from syntax.summaries import Outline
from syntax.symbols.model import DECLARATION_KINDS, Symbol

# The kinds these lists show (dedented: see _group).
LISTED_KINDS = DECLARATION_KINDS | {"constant"}
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text))


def _group(
    kind: str, name: str, syms: list[Symbol], texts: list[str], used_names: set[str], rank: float, reason: str
) -> Candidate:
    # Dedented (an import under "if TYPE_CHECKING:" is shown without its if) and listed without
    # markers between them: the list reads as one block of names.
    pieces = [Piece(s.start_line, s.end_line, t.lstrip(), group=kind) for s, t in zip(syms, texts, strict=True)]
    forms = [Form("summary", pieces)]
    used = [p for p in pieces if _words(p.text) & used_names]
    if used and len(used) < len(pieces):
        forms.append(Form("summary", used, note=f"only the {len(used)} of {len(pieces)} used near the cursor"))
    return Candidate(kind=kind, name=name, start_line=syms[0].start_line, end_line=syms[-1].end_line,
                     tier=TIER_IMPORTS, rank=rank, reason=reason, forms=forms, key=kind)


def import_candidates(outline: Outline, used_names: set[str], exclude: set[int]) -> list[Candidate]:
    """``used_names``: identifiers of the code around the cursor (only used to choose a subset)."""
    top = outline.table.top_level()
    imports = [s for s in top if s.kind in DECLARATION_KINDS]
    constants = [s for s in top if s.kind == "constant" and s.index not in exclude]
    out: list[Candidate] = []
    if imports:
        out.append(_group("imports", f"imports ({len(imports)})", imports,
                          [outline.summaries[s.index] for s in imports], used_names, 0,
                          "imports, reduced to names and aliases"))
    if constants:
        out.append(_group("constants", f"module constants ({len(constants)})", constants,
                          [outline.summaries[s.index] for s in constants], used_names, 1,
                          "module constants, names (and short values)"))
    return out
