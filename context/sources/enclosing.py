"""The block around the cursor: the whole enclosing function/method, always.

It wins over every other source. When it alone is larger than the budget, its signature is
kept with the lines nearest the cursor (three quarters of the budget before the cursor, one
quarter after). Outside any function (module level, a class body between methods) the lines
nearest the cursor stand in for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from context.model import ContextBlock
from context.packing.pack import Piece, TokenCounter
from context.packing.tokens import exact_counter, take_while_fits
from syntax.parsed_file import ParsedFile
from syntax.summaries import Outline
from syntax.symbols.model import Symbol

# Share of the enclosing block's budget given to the code after the cursor when it must be cut.
SUFFIX_SHARE = 0.25
# Outside a function, how much of the budget the nearby lines may take (the rest goes to
# the class header, references and imports, which carry more signal there).
WINDOW_SHARE = 0.5


@dataclass
class Enclosing:
    symbol: Symbol | None
    kind: str
    name: str
    start_line: int
    end_line: int
    form: str  # "whole" | "partial"
    prefix_pieces: list[Piece]  # the last one ends exactly at the cursor
    suffix: str
    tokens: int
    reason: str
    # Lines actually shown (reference extraction looks here first).
    shown_ranges: list[tuple[int, int]] = field(default_factory=list)
    # The last line the suffix shows to its end, when nothing of the file is skipped between the
    # cursor and it (None: the suffix stops inside a block too big to show whole).
    suffix_end_line: int | None = None

    def block(self) -> ContextBlock:
        """The enclosing block as the report's first block."""
        return ContextBlock(kind=self.kind, name=self.name, start_line=self.start_line, end_line=self.end_line,
                            form=self.form, tokens=self.tokens, reason=self.reason)


def _take_lines_backward(
    parsed: ParsedFile, first_line: int, cursor_line: int, cursor_byte: int, budget: int,
    count_tokens: TokenCounter,
) -> tuple[int, str, int]:
    """Lines ending at the cursor, going up while they fit. Returns (start line, text, tokens)."""
    head = parsed.text(parsed.line_byte(cursor_line), cursor_byte)
    above = (parsed.lines_text(line, line) for line in range(cursor_line - 1, first_line - 1, -1))
    taken, tokens, _ = take_while_fits(above, budget, count_tokens(head), count_tokens)
    return cursor_line - len(taken), "".join(reversed(taken)) + head, tokens


def _take_lines_forward(
    parsed: ParsedFile, cursor_byte: int, cursor_line: int, last_line: int, budget: int,
    count_tokens: TokenCounter,
) -> tuple[int, str, int]:
    tail = parsed.text(cursor_byte, parsed.line_end_byte(cursor_line))
    tokens = count_tokens(tail)
    if tokens > budget:
        return cursor_line, "", 0
    below = (parsed.lines_text(line, line) for line in range(cursor_line + 1, last_line + 1))
    taken, tokens, _ = take_while_fits(below, budget, tokens, count_tokens)
    return cursor_line + len(taken), tail + "".join(taken), tokens


def find_enclosing(
    outline: Outline,
    line: int,
    cursor_byte: int,
    budget: int,
    count_tokens: TokenCounter,
    marker_tokens: int,
) -> Enclosing:
    sym = outline.table.enclosing_function(line)
    if sym is not None:
        return _function_block(outline, sym, line, cursor_byte, budget, count_tokens, marker_tokens)
    return _window(outline, line, cursor_byte, budget, count_tokens)


def _function_block(
    outline: Outline, sym: Symbol, line: int, cursor_byte: int, budget: int,
    count_tokens: TokenCounter, marker_tokens: int,
) -> Enclosing:
    parsed = outline.parsed
    start_byte = parsed.line_byte(sym.start_line)
    end_byte = parsed.line_end_byte(sym.end_line)
    prefix_text = parsed.text(start_byte, cursor_byte)
    suffix_text = parsed.text(cursor_byte, end_byte)
    exact = exact_counter(count_tokens)  # by memoised segments: see packing/tokens.py
    tokens = exact(prefix_text) + exact(suffix_text)
    label = sym.qualname
    if tokens <= budget:
        return Enclosing(
            symbol=sym, kind=sym.kind, name=label, start_line=sym.start_line, end_line=sym.end_line,
            form="whole", prefix_pieces=[Piece(sym.start_line, line, prefix_text)], suffix=suffix_text,
            tokens=tokens, reason=f"encloses the cursor (line {line + 1}); always included whole when it fits",
            shown_ranges=[(sym.start_line, sym.end_line)], suffix_end_line=sym.end_line,
        )
    # Too big: signature + the lines nearest the cursor.
    head_first, head_last = outline.headers[sym.index]
    pieces: list[Piece] = []
    head_tokens = 0
    if line > head_last:
        head_start = sym.start_line  # doc comment and decorators included
        head_text = parsed.lines_text(head_start, head_last)
        head_tokens = count_tokens(head_text) + marker_tokens
        if head_tokens > budget // 2:  # a monstrous decorator stack or doc comment: the def line only
            head_start = head_last = head_first
            head_text = parsed.lines_text(head_first, head_first)
            head_tokens = count_tokens(head_text) + marker_tokens
        pieces.append(Piece(head_start, head_last, head_text))
    suffix_budget = int(budget * SUFFIX_SHARE)
    prefix_budget = max(0, budget - suffix_budget - head_tokens)
    first_allowed = head_last + 1 if pieces else sym.start_line
    back_start, back_text, back_tokens = _take_lines_backward(
        parsed, first_allowed, line, cursor_byte, prefix_budget, count_tokens
    )
    # Hand the prefix's unused share to the suffix.
    suffix_budget += prefix_budget - back_tokens
    fwd_end, fwd_text, fwd_tokens = _take_lines_forward(
        parsed, cursor_byte, line, sym.end_line, suffix_budget, count_tokens
    )
    pieces.append(Piece(back_start, line, back_text))
    shown = [(p.start_line, p.end_line) for p in pieces[:-1]] + [(back_start, fwd_end)]
    return Enclosing(
        symbol=sym, kind=sym.kind, name=label, start_line=sym.start_line, end_line=sym.end_line,
        form="partial", prefix_pieces=pieces, suffix=fwd_text, tokens=head_tokens + back_tokens + fwd_tokens,
        reason=(f"encloses the cursor (line {line + 1}) but needs {tokens} tokens > budget {budget}: "
                f"signature + lines {back_start + 1}-{fwd_end + 1} nearest the cursor"),
        shown_ranges=shown,
    )


def _window(
    outline: Outline, line: int, cursor_byte: int, budget: int, count_tokens: TokenCounter,
) -> Enclosing:
    """No enclosing function: the lines nearest the cursor, inside the innermost container."""
    parsed = outline.parsed
    cls = outline.table.enclosing_class(line)
    first = cls.start_line if cls is not None else 0
    last = cls.end_line if cls is not None else parsed.line_count - 1
    share = int(budget * WINDOW_SHARE)
    suffix_budget = int(share * SUFFIX_SHARE)
    back_start, back_text, back_tokens = _take_lines_backward(
        parsed, first, line, cursor_byte, share - suffix_budget, count_tokens
    )
    fwd_end, fwd_text, fwd_tokens = _take_lines_forward(
        parsed, cursor_byte, line, last, suffix_budget + (share - suffix_budget - back_tokens), count_tokens
    )
    where = f"{cls.kind} {cls.qualname}" if cls is not None else "module level"
    return Enclosing(
        symbol=None, kind="window", name=f"<{where}>", start_line=back_start, end_line=fwd_end, form="partial",
        prefix_pieces=[Piece(back_start, line, back_text)], suffix=fwd_text, tokens=back_tokens + fwd_tokens,
        reason=f"cursor at {where} (no enclosing function): the lines nearest the cursor",
        shown_ranges=[(back_start, fwd_end)], suffix_end_line=fwd_end if fwd_text else None,
    )
