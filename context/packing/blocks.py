"""Turning a symbol of the file into a packing candidate (whole block, or structured summary)."""

from __future__ import annotations

from context.packing.pack import Candidate, Form, Piece
from syntax.parsed_file import ParsedFile
from syntax.summaries import header_line_range, summarize
from syntax.symbols.model import CLASS_KINDS, Symbol


def whole_piece(parsed: ParsedFile, sym: Symbol) -> Piece:
    return Piece(sym.start_line, sym.end_line, parsed.lines_text(sym.start_line, sym.end_line), verbatim=True)


def summary_piece(parsed: ParsedFile, sym: Symbol) -> Piece:
    text = summarize(parsed, sym)
    piece = Piece(sym.start_line, sym.end_line, text)
    if sym.is_container or sym.kind in CLASS_KINDS:
        # Head only, so that members shown as separate excerpts can follow it.
        piece.open_text = summarize(parsed, sym, open_container=True)
        piece.open_end_line = header_line_range(parsed, sym)[1]
    return piece


def symbol_forms(parsed: ParsedFile, sym: Symbol, *, allow_whole: bool = True) -> list[Form]:
    forms: list[Form] = []
    if allow_whole:
        forms.append(Form("whole", [whole_piece(parsed, sym)]))
    if sym.body_start_byte is not None or sym.kind in ("import", "constant", "variable", "package"):
        summary = summary_piece(parsed, sym)
        if not forms or summary.text != forms[0].pieces[0].text:
            forms.append(Form("summary", [summary]))
    elif not forms:
        forms.append(Form("whole", [whole_piece(parsed, sym)]))
    return forms


def symbol_candidate(
    parsed: ParsedFile, sym: Symbol, *, tier: int, rank: float, reason: str, allow_whole: bool = True
) -> Candidate:
    return Candidate(
        kind=sym.kind,
        name=sym.qualname,
        start_line=sym.start_line,
        end_line=sym.end_line,
        tier=tier,
        rank=rank,
        reason=reason,
        forms=symbol_forms(parsed, sym, allow_whole=allow_whole),
        key=f"sym:{sym.index}",
    )
