"""The file's head: the part of an optimized prompt that does not depend on the cursor.

The imports reduced to names, then an outline of the file's declarations in file order (signatures with
their doc line, a class as its header and its members' signatures), from the top of the file down to the
first declaration the head's share of the budget cannot hold. It is the same text for every cursor in a
file version, so it is placed first: when the cursor moves to another function of an open file, the engine
reuses the head's KV and processes only the cursor's part of the prompt. Its elision markers do not name
lines, so an edit inside a body (typing, a new line) changes nothing in it and its KV survives typing too;
an edit to a signature changes the head at that declaration's outline line, and an edit below the head's
end none of it. Only the candidates down to that end are worked out, so its cost does not grow with the
file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from context.model import AssembledContext, ContextBlock
from context.packing.pack import Piece, render_excerpts
from syntax.parsed_file import ParsedFile
from syntax.summaries import header_line_range, reduce_import, summarize
from syntax.symbols.model import CLASS_KINDS, FileSymbols, Symbol

OUTLINE_KINDS = frozenset({"function", "method", "constructor", "constant", "variable", "type", "macro",
                           *CLASS_KINDS})


@dataclass
class FileHead:
    text: str
    tokens: int
    last_line: int  # the last line of the file the head covers (-1: none)
    symbols: int  # declarations outlined
    # It shows imports: the cursor's part leaves the import list out, the imports the head could not show too
    # (they cost more than they gave when the cursor's part took them: docs/context.md).
    imports: bool
    items: int = 0  # how many of the candidates take_items kept it shows (render_head may shed the last ones)


HeadItem = list[Piece]  # an import, or a declaration's outline
HeadKey = tuple[tuple[str, str], ...]


def _outline(parsed: ParsedFile, members: dict[int, list[Symbol]], sym: Symbol) -> Iterator[HeadItem]:
    """A declaration's outline, one candidate per declaration: a container's header, then each of its members'
    (so a long class fills what is left of the head instead of ending it)."""
    if not (sym.is_container or sym.kind in CLASS_KINDS):
        yield [Piece(sym.start_line, sym.end_line, summarize(parsed, sym))]
        return
    yield [Piece(sym.start_line, header_line_range(parsed, sym)[1], summarize(parsed, sym, open_container=True))]
    for member in members.get(sym.index, ()):
        if member.kind in OUTLINE_KINDS:
            yield from _outline(parsed, members, member)


def head_items(table: FileSymbols) -> Iterator[HeadItem]:
    """The head's candidates in file order, worked out one at a time: each import reduced to its names, each
    declaration's outline line (a class's header, then its members')."""
    parsed = table.parsed
    members: dict[int, list[Symbol]] = {}
    for sym in table.symbols:
        if sym.parent is not None:
            members.setdefault(sym.parent, []).append(sym)
    for sym in table.symbols:
        if sym.parent is not None:
            continue
        if sym.kind in ("import", "package"):
            yield [Piece(sym.start_line, sym.end_line, reduce_import(parsed, sym).lstrip(), group="imports")]
        elif sym.kind in OUTLINE_KINDS:
            yield from _outline(parsed, members, sym)


def take_items(table: FileSymbols, budget_tokens: int, count_tokens: Callable[[str], int]
               ) -> tuple[list[HeadItem], HeadKey]:
    """The candidates the head shows: from the top of the file, as long as each fits in what is left of the budget
    (the first that does not ends the head, so a change further down the file never touches it). Also returns
    what the head's text depends on: the texts of those candidates and of the one that ended it, not their lines
    (the markers name none)."""
    kept: list[HeadItem] = []
    seen: list[tuple[str, str]] = []
    left = budget_tokens
    group = ""
    for item in head_items(table):
        seen += [(p.text, p.group) for p in item]
        joined = bool(group) and item[0].group == group  # the import list's lines follow each other unmarked
        cost = sum(count_tokens(p.text) for p in item) + (0 if joined else 2)  # 2: the gap's marker, roughly
        if cost > left:
            break
        kept.append(item)
        left -= cost
        group = item[-1].group
    return kept, tuple(seen)


def last_line(kept: list[HeadItem]) -> int:
    return max((p.end_line for item in kept for p in item), default=-1)


def render_head(kept: list[HeadItem], language: str, file_lines: list[str], budget_tokens: int,
                count_tokens: Callable[[str], int]) -> FileHead:
    """The head's text within ``budget_tokens`` (the real count, markers and merges included: candidates are shed
    from the end until it fits). It depends on the file alone, never on the cursor."""
    kept = list(kept)
    while kept:
        pieces = [p for item in kept for p in item]
        text, last = render_excerpts(pieces, language, file_lines, numbered=False)
        tokens = count_tokens(text)
        if tokens <= budget_tokens:
            imports = any(p.group == "imports" for p in pieces)
            symbols = sum(1 for item in kept if item[0].group != "imports")
            return FileHead(text, tokens, last, symbols, imports, len(kept))
        kept.pop()
    return FileHead("", 0, -1, 0, False)


def with_head(ctx: AssembledContext, head: FileHead | None) -> AssembledContext:
    """The file's head before the cursor's part (stable_head); the cursor's part alone without one."""
    if head is None or not head.text:
        return ctx
    ctx.prefix = head.text + ctx.prefix
    ctx.context_tokens += head.tokens
    ctx.stable_chars += len(head.text)
    ctx.head_chars = len(head.text)
    ctx.blocks.insert(0, ContextBlock(
        kind="head", name=f"file head: imports and {head.symbols} declarations", start_line=0,
        end_line=max(head.last_line, 0), form="summary", tokens=head.tokens,
        reason="the same for every cursor in this version of the file (stable_head)"))
    return ctx
