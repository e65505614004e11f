"""The file's head: the part of an optimized prompt that does not depend on the cursor.

The imports reduced to names, then an outline of the file's declarations in file order (signatures with
their doc line, a class as its header and its members' signatures), as much of it as the head's share of
the budget holds. It is the same text for every cursor in a file version, so it is placed first: when the
cursor moves to another function of an open file, the engine reuses the head's KV and processes only the
cursor's part of the prompt. An edit inside a body changes no signature, so the head (and its KV) survives
typing too; an edit to a signature changes the head from that declaration on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from indexer.summaries import reduce_import
from indexer.syntax.symbols.model import CLASS_KINDS, FileSymbols, Symbol
from workers.context.blocks import summary_piece
from workers.context.model import AssembledContext, ContextBlock
from workers.context.packing import Piece, render_excerpts

OUTLINE_KINDS = frozenset({"function", "method", "constructor", "constant", "variable", "type", "macro",
                           *CLASS_KINDS})


@dataclass
class FileHead:
    text: str
    tokens: int
    last_line: int  # the last line of the file the head covers (-1: none)
    symbols: int  # declarations outlined
    imports: bool  # the import list is in the head: the cursor's part leaves it out
    pieces: list[Piece] = field(default_factory=list)


def _outline(table: FileSymbols, sym: Symbol) -> list[Piece]:
    """A declaration's pieces for the outline: a container as its header and its members' signatures."""
    parsed = table.parsed
    piece = summary_piece(parsed, sym)
    if piece.open_text is None:
        return [piece]
    members = [m for m in table.symbols if m.parent == sym.index and m.kind in OUTLINE_KINDS]
    head = Piece(sym.start_line, piece.open_end_line if piece.open_end_line is not None else sym.start_line,
                 piece.open_text)
    return [head, *(p for m in members for p in _outline(table, m))]


def _items(table: FileSymbols) -> list[list[Piece]]:
    """The head's candidates in file order: each import reduced to its names, each top-level declaration's outline."""
    parsed = table.parsed
    items: list[list[Piece]] = []
    for sym in table.symbols:
        if sym.parent is not None:
            continue
        if sym.kind in ("import", "package"):
            items.append([Piece(sym.start_line, sym.end_line, reduce_import(parsed, sym).lstrip(), group="imports")])
        elif sym.kind in OUTLINE_KINDS:
            items.append(_outline(table, sym))
    return items


def file_head(table: FileSymbols, language: str, file_lines: list[str], budget_tokens: int,
              count_tokens: Callable[[str], int]) -> FileHead:
    """The head within ``budget_tokens``: the file's imports and declarations in file order, each taken whole when
    it fits in what is left (a class whose outline is too long is left out, the next one may fit). It depends on
    the file alone, never on the cursor."""
    kept: list[list[Piece]] = []
    left = budget_tokens
    for item in _items(table):
        cost = sum(count_tokens(p.text) for p in item) + 2  # the gap's marker, roughly
        if cost <= left:
            kept.append(item)
            left -= cost
    while kept:  # the real count, markers and merges included; shed from the end until it fits
        pieces = [p for item in kept for p in item]
        text, last = render_excerpts(pieces, language, file_lines)
        tokens = count_tokens(text)
        if tokens <= budget_tokens:
            imports = any(p.group == "imports" for p in pieces)
            return FileHead(text, tokens, last, sum(1 for item in kept if item[0].group != "imports"), imports,
                            pieces)
        kept.pop()
    return FileHead("", 0, -1, 0, False)


def with_head(ctx: AssembledContext, head: FileHead | None) -> AssembledContext:
    """The file's head before the cursor's part (stable_head); the cursor's part alone without one."""
    if head is None or not head.text:
        return ctx
    ctx.prefix = head.text + ctx.prefix
    ctx.context_tokens += head.tokens
    ctx.stable_chars += len(head.text)
    ctx.blocks.insert(0, ContextBlock(
        kind="head", name=f"file head: imports and {head.symbols} declarations", start_line=0,
        end_line=max(head.last_line, 0), form="summary", tokens=head.tokens,
        reason="the same for every cursor in this version of the file (stable_head)"))
    return ctx
