"""The code just above the enclosing block, verbatim: what a sliding window would have shown.

Sibling methods written just before the cursor's function are the best examples of the file's
idioms (how ``self._foo`` is called, which helpers come in which order), and a window-based
prompt owes much of its quality to them. After the cursor's own dependencies (class header,
referenced blocks, edits, imports), whatever budget is left goes to these lines before it goes
to bare sibling signatures.

The excerpt grows upwards one statement-level step at a time and never starts at an arbitrary
line: it starts at a sibling block's first line, or at a statement of a sibling's body, and
then that sibling's signature is shown above it with an elision marker, so that the model
always knows whose body it is reading. The forms are nested ranges ending at the enclosing
block, richest first; packing takes the richest that fits.
"""

from __future__ import annotations

from context.packing.pack import TIER_NEARBY, Candidate, Form, Piece
from context.packing.tokens import LineRangeTokens
from context.sources.enclosing import Enclosing
from syntax.summaries import Outline
from syntax.symbols.model import Symbol

# More lines than this above the cursor's block are not worth their prefill cost.
MAX_LINES = 240
# Forms offered at most (each is one more step further up).
MAX_FORMS = 24


def _body_statement_lines(outline: Outline, sym: Symbol) -> list[int]:
    """First lines of the statements directly in ``sym``'s body (after its header)."""
    if sym.body_start_byte is None or sym.body_end_byte is None:
        return []
    body = outline.parsed.tree.root_node.descendant_for_byte_range(sym.body_start_byte, sym.body_end_byte)
    if body is None:
        return []
    head_last = outline.headers[sym.index][1]
    return [child.start_point[0] for child in body.named_children if child.start_point[0] > head_last]


def _starts(outline: Outline, enc: Enclosing, top: int) -> list[tuple[int, Symbol | None]]:
    """Where an excerpt may start, nearest the enclosing block first, with the sibling whose
    body it starts in (None: it starts at a block boundary)."""
    table, parsed = outline.table, outline.parsed
    parent = enc.symbol.parent if enc.symbol is not None else None
    floor = 0
    if parent is not None:  # the class head belongs to the class-header source
        floor = outline.headers[parent][1] + 1
    low = max(floor, top - MAX_LINES)
    siblings = [s for s in table.symbols
                if s.parent == parent and s.end_line < top and s.start_line >= low]
    out: dict[int, Symbol | None] = {}
    for sib in siblings:
        out[sib.start_line] = None
    # Inside the nearest sibling(s), statement starts give finer steps: a long method just
    # above the cursor's one need not be all or nothing.
    for sib in sorted(siblings, key=lambda s: -s.end_line)[:2]:
        for line in _body_statement_lines(outline, sib):
            if low <= line < top and line not in out:
                out[line] = sib
    if not siblings:  # a script, or a first method: paragraph starts after blank lines
        def blank(i: int) -> bool:
            return not parsed.lines_text(i, i).strip()

        for i in range(top - 1, low - 1, -1):
            if not blank(i) and (i == floor or blank(i - 1)):
                out[i] = None
    if parent is not None:
        # Past the class head: the class from its first line (decorators included), then what
        # precedes the class (a short class's code above it is what a window would show next:
        # the sibling class, often written the same way).
        cls = table.symbols[parent]
        outer_low = top - MAX_LINES
        if cls.start_line >= outer_low:
            out[cls.start_line] = None
            outer = [s for s in table.symbols
                     if s.parent == cls.parent and s.end_line < cls.start_line and s.start_line >= outer_low]
            for sib in outer:
                out.setdefault(sib.start_line, None)
            nearest = max(outer, key=lambda s: s.end_line, default=None)
            if nearest is not None:
                for line in _body_statement_lines(outline, nearest):
                    if outer_low <= line < cls.start_line:
                        out.setdefault(line, nearest)
    return sorted(out.items(), key=lambda item: -item[0])


def nearby_candidates(
    outline: Outline, enc: Enclosing, estimate_lines: LineRangeTokens, budget: int, marker_tokens: int
) -> list[Candidate]:
    top = min(a for a, _ in enc.shown_ranges)
    if top <= 0 or budget <= 0:
        return []
    parsed = outline.parsed
    forms: list[Form] = []
    end = top - 1
    tokens = 0  # of the contiguous lines start..top-1, estimated step by step
    for start, inside in _starts(outline, enc, top):
        if len(forms) >= MAX_FORMS:
            break
        tokens += estimate_lines(start, end)
        end = start - 1
        pieces = [Piece(start, top - 1, parsed.lines_text(start, top - 1), verbatim=True)]
        cost = tokens + marker_tokens
        if inside is not None:
            head_first, head_last = inside.start_line, outline.headers[inside.index][1]
            head = parsed.lines_text(head_first, head_last)
            pieces.insert(0, Piece(head_first, head_last, head, verbatim=True))
            cost += estimate_lines(head_first, head_last) + marker_tokens
        if cost > budget:
            break
        forms.append(Form("whole", pieces, tokens=cost, note=f"{top - start} lines"))
    if not forms:
        return []
    forms.reverse()  # richest first
    first = forms[0].pieces[0].start_line
    return [Candidate(
        kind="nearby", name=f"lines above {enc.name}", start_line=first, end_line=top - 1,
        tier=TIER_NEARBY, rank=0, reason="code just above the enclosing block, verbatim (the file's own idioms)",
        forms=forms, key="nearby", share_capped=False,
    )]
