"""Turning a symbol of the file into a packing candidate (whole block, or structured summary)."""

from __future__ import annotations

from context.packing.pack import Candidate, Form, Piece
from syntax.parsed_file import ParsedFile
from syntax.summaries import Outline
from syntax.symbols.model import Symbol


def whole_piece(parsed: ParsedFile, sym: Symbol) -> Piece:
    return Piece(sym.start_line, sym.end_line, parsed.lines_text(sym.start_line, sym.end_line), verbatim=True)


def summary_piece(outline: Outline, sym: Symbol) -> Piece:
    piece = Piece(sym.start_line, sym.end_line, outline.summaries[sym.index])
    head = outline.heads[sym.index]
    if head is not None:
        # Head only, so that members shown as separate excerpts can follow it.
        piece.open_text = head
        piece.open_end_line = outline.headers[sym.index][1]
    return piece


def symbol_forms(outline: Outline, sym: Symbol, *, allow_whole: bool = True) -> list[Form]:
    forms: list[Form] = []
    if allow_whole:
        forms.append(Form("whole", [whole_piece(outline.parsed, sym)]))
    if sym.body_start_byte is not None or sym.kind in ("import", "constant", "variable", "package"):
        summary = summary_piece(outline, sym)
        if not forms or summary.text != forms[0].pieces[0].text:
            forms.append(Form("summary", [summary]))
    elif not forms:
        forms.append(Form("whole", [whole_piece(outline.parsed, sym)]))
    return forms


def symbol_candidate(
    outline: Outline, sym: Symbol, *, tier: int, rank: float, reason: str, allow_whole: bool = True
) -> Candidate:
    return Candidate(
        kind=sym.kind,
        name=sym.qualname,
        start_line=sym.start_line,
        end_line=sym.end_line,
        tier=tier,
        rank=rank,
        reason=reason,
        forms=symbol_forms(outline, sym, allow_whole=allow_whole),
        key=f"sym:{sym.index}",
    )
