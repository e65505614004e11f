"""Ranking and packing of context candidates into a token budget, and rendering of the prompt.

Every source module (enclosing block, class header, references, recent edits, imports,
neighbours) turns what it found into ``Candidate``s: a priority (tier, rank), a reason, and one
or more ``Form``s from richest to cheapest (whole block, structured summary). Packing is one
pass in priority order: the richest form that fits (and is not larger than a share of the
budget, so that one big block cannot starve everything after it), else a cheaper one, else the
candidate is dropped and reported as such.

Rendering puts the chosen excerpts in file order with elision markers between them, and the
enclosing block last, so the prompt prefix ends exactly at the cursor and its stable part (what
does not change while the user types inside one function) comes first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from context.packing.tokens import TokenCounter
from syntax.summaries import elision_marker

# Priority tiers, nearest first (the seed's order); lower is more important.
TIER_ENCLOSING = 0
TIER_CLASS_HEADER = 1
TIER_REFERENCED = 2
TIER_RECENT_EDIT = 3
TIER_IMPORTS = 4
# Lines elsewhere in the file that resemble the cursor's (see similar.py).
TIER_SIMILAR = 3.5
TIER_NEARBY = 5
TIER_NEIGHBOURS = 6

# No tokenizer packs code denser than this; text longer than budget * this cannot fit.
MAX_CHARS_PER_TOKEN = 12


@dataclass
class Piece:
    """Text standing for lines ``start_line..end_line`` (0-based, inclusive) of the file."""

    start_line: int
    end_line: int
    text: str  # ends with a newline
    # A class-like summary can be rendered "open" (head only) when some of its members are shown too.
    open_text: str | None = None
    open_end_line: int | None = None
    group: str = ""  # consecutive pieces of one group (the import list) need no marker between them
    # The file's own lines, unchanged: may be cut at the top where an earlier piece already shows them.
    verbatim: bool = False


@dataclass
class Form:
    name: str  # "whole" | "summary" | "partial"
    pieces: list[Piece]
    tokens: int = 0
    note: str = ""  # appended to the candidate's reason when this form is the one used


@dataclass
class Candidate:
    kind: str
    name: str
    start_line: int
    end_line: int
    tier: int
    rank: float  # order inside the tier, lower first
    reason: str
    forms: list[Form]  # richest first
    key: str = ""  # de-duplication key (a symbol index); empty: never merged
    chosen: Form | None = None
    drop_reason: str = ""
    # Subject to the one-block share of the budget (MAX_WHOLE_SHARE); the nearby lines are not:
    # they are the budget's filler, a run of the file's own lines grown step by step.
    share_capped: bool = True

    @property
    def priority(self) -> tuple[int, float]:
        return (self.tier, self.rank)


@dataclass
class PackResult:
    chosen: list[Candidate]
    dropped: list[Candidate]
    tokens: int


def merge_duplicates(candidates: list[Candidate]) -> list[Candidate]:
    """One candidate per key, the highest-priority one, with the other sources' reasons appended."""
    best: dict[str, Candidate] = {}
    out: list[Candidate] = []
    for cand in sorted(candidates, key=lambda c: c.priority):
        if cand.key and cand.key in best:
            kept = best[cand.key]
            if cand.reason not in kept.reason and cand.tier != TIER_NEIGHBOURS:
                kept.reason = f"{kept.reason}; also {cand.reason}"
            continue
        if cand.key:
            best[cand.key] = cand
        out.append(cand)
    return out


def form_tokens(
    form: Form, count_tokens: TokenCounter, marker_tokens: int,
    estimate_lines: Callable[[int, int], int] | None = None,
) -> int:
    """Tokens of a form, counting one elision marker per piece (the worst case). Verbatim pieces
    are estimated from per-line counts when ``estimate_lines`` is given (see tokens.py)."""
    if form.tokens == 0:
        form.tokens = sum(
            (estimate_lines(p.start_line, p.end_line) if estimate_lines is not None and p.verbatim
             else count_tokens(p.text)) + marker_tokens
            for p in form.pieces)
    return form.tokens


def _cost(
    form: Form, count_tokens: TokenCounter, marker_tokens: int, shown: list[tuple[int, int]],
    estimate_lines: Callable[[int, int], int] | None = None,
) -> int:
    """Tokens a form adds given what is already shown: no marker for a piece that continues one."""
    form_tokens(form, count_tokens, marker_tokens, estimate_lines)
    saved = sum(marker_tokens for p in form.pieces
                if any(end == p.start_line - 1 or start == p.end_line + 1 for start, end in shown))
    return form.tokens - saved


def pack(
    candidates: list[Candidate],
    budget: int,
    count_tokens: TokenCounter,
    marker_tokens: int,
    max_whole_tokens: int,
    shown: list[tuple[int, int]] | None = None,
    estimate_lines: Callable[[int, int], int] | None = None,
    reserve: int = 0,
) -> PackResult:
    """One pass in priority order; ``shown``: line ranges already in the prompt (the enclosing block).
    ``reserve``: tokens that candidates before the nearby tier (recent edits excepted) may not use:
    held for the nearby lines."""
    remaining = budget
    chosen: list[Candidate] = []
    dropped: list[Candidate] = []
    shown = list(shown or [])
    verbatim_shown = list(shown)  # the enclosing block is the file's own lines
    for cand in sorted(candidates, key=lambda c: c.priority):
        if _covered(cand.start_line, cand.end_line, verbatim_shown):
            continue  # already in the prompt as real code (inside a larger excerpt): adds nothing
        picked: Form | None = None
        cost = 0
        for i, form in enumerate(cand.forms):
            is_last = i == len(cand.forms) - 1
            if form.name == "whole" and not is_last and cand.share_capped and (
                sum(len(p.text) for p in form.pieces) > max_whole_tokens * MAX_CHARS_PER_TOKEN
            ):
                continue  # obviously too big: do not even pay for counting it
            cost = _cost(form, count_tokens, marker_tokens, shown, estimate_lines)
            if form.name == "whole" and cost > max_whole_tokens and not is_last and cand.share_capped:
                continue  # a huge block is worth more as a signature than as a budget hog
            if cost <= remaining - (reserve if _holds_back(cand.tier) else 0):
                picked = form
                break
        if picked is None:
            held = reserve if _holds_back(cand.tier) else 0
            cand.drop_reason = (f"does not fit: needs {cost} tokens as {cand.forms[-1].name}, {remaining - held} left"
                                + (f" ({held} more held for the lines above: nearby_first)" if held else ""))
            dropped.append(cand)
            continue
        cand.chosen = picked
        remaining -= cost
        shown.extend((p.start_line, p.end_line) for p in picked.pieces)
        verbatim_shown.extend((p.start_line, p.end_line) for p in picked.pieces if p.verbatim)
        chosen.append(cand)
    return PackResult(chosen=chosen, dropped=dropped, tokens=budget - remaining)


def _holds_back(tier: float) -> bool:
    """Does the nearby reserve apply to this tier? Not to recent edits: the user's own current work
    outranks the file's idioms."""
    return tier < TIER_NEARBY and tier != TIER_RECENT_EDIT


def _covered(start: int, end: int, ranges: list[tuple[int, int]]) -> bool:
    """Is every line of start..end inside the union of ``ranges``?"""
    line = start
    for a, b in sorted(ranges):
        if a > line:
            break
        line = max(line, b + 1)
    return line > end


def _overlaps(p: Piece, q: Piece) -> bool:
    return p.start_line <= q.end_line and q.start_line <= p.end_line


def _prefer_verbatim(pieces: list[Piece]) -> list[Piece]:
    """Where a summary and the real lines of the same region are both chosen, the real lines win:
    the summary is dropped, or rendered open (head only) when its head lies above them."""
    verbatim = [p for p in pieces if p.verbatim]
    if not verbatim:
        return pieces
    out: list[Piece] = []
    for p in pieces:
        hits = [] if p.verbatim else [v for v in verbatim if _overlaps(p, v)]
        if not hits:
            out.append(p)
        elif p.open_text is not None and p.open_end_line is not None and all(
            v.start_line > p.open_end_line for v in hits
        ):
            out.append(Piece(p.start_line, p.open_end_line, p.open_text))
    return out


def _indent(text: str) -> str:
    first = text.split("\n", 1)[0]
    return first[: len(first) - len(first.lstrip())]


def _gap_is_blank(lines: list[str], start: int, end: int) -> bool:
    return all(not lines[i].strip() for i in range(max(0, start), min(end + 1, len(lines))))


@dataclass
class Segment:
    """One rendered excerpt piece: where it starts in the excerpt text (its elision marker
    included) and the file lines it shows."""

    offset: int
    start_line: int
    end_line: int
    verbatim: bool


def render_excerpts(
    pieces: list[Piece], language: str, file_lines: list[str], segments: list[Segment] | None = None,
) -> tuple[str, int]:
    """Excerpts in file order with elision markers in the gaps. Returns (text, last line shown);
    ``segments``, when given, receives each rendered piece's place in the text."""
    ordered = sorted(_prefer_verbatim(pieces), key=lambda p: (p.start_line, -p.end_line))
    # Drop pieces already covered by a larger one (the same block offered twice).
    kept: list[Piece] = []
    for p in ordered:
        if kept and kept[-1].start_line <= p.start_line and p.end_line <= kept[-1].end_line and (
            kept[-1].open_text is None
        ):
            continue
        kept.append(p)
    # A summarised container with members shown is rendered open: its head, then the members.
    for i, p in enumerate(kept):
        if p.open_text is not None and any(
            q is not p and p.start_line <= q.start_line and q.end_line <= p.end_line for q in kept
        ):
            kept[i] = Piece(p.start_line, p.open_end_line if p.open_end_line is not None else p.start_line,
                            p.open_text)
    out: list[str] = []
    shown_until = -1
    prev_group = ""
    for p in kept:
        if p.end_line <= shown_until and p.start_line <= shown_until:
            continue
        if p.start_line <= shown_until and p.verbatim:
            overlap = shown_until - p.start_line + 1
            p = Piece(shown_until + 1, p.end_line, "".join(p.text.splitlines(keepends=True)[overlap:]), verbatim=True)
        gap_start, gap_end = shown_until + 1, p.start_line - 1
        same_group = bool(p.group) and prev_group == p.group
        prev_group = p.group
        if segments is not None:
            segments.append(Segment(sum(map(len, out)), p.start_line, p.end_line, p.verbatim))
        if gap_end >= gap_start and not same_group and not _gap_is_blank(file_lines, gap_start, gap_end):
            out.append(elision_marker(language, gap_start, gap_end, _indent(p.text)))
        out.append(p.text if p.text.endswith("\n") else p.text + "\n")
        shown_until = max(shown_until, p.end_line)
    return "".join(out), shown_until


@dataclass
class Rendered:
    prefix: str
    suffix: str
    excerpt_text: str = ""
    pieces: list[Piece] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    above: int = -1  # the last line an excerpt above the enclosing block shows (see render_enclosing)


def render_prompt(
    chosen: list[Candidate],
    enclosing_pieces: list[Piece],
    suffix: str,
    language: str,
    file_lines: list[str],
) -> Rendered:
    """Excerpts first (file order), then the enclosing block up to the cursor."""
    pieces = [p for c in chosen if c.chosen is not None for p in c.chosen.pieces]
    segments: list[Segment] = []
    excerpts, _shown_until = render_excerpts(pieces, language, file_lines, segments)
    prefix = excerpts
    above = -1
    if enclosing_pieces:
        first = enclosing_pieces[0].start_line
        above = max((p.end_line for p in pieces if p.end_line < first), default=-1)
        prefix += render_enclosing(enclosing_pieces, above, language, file_lines)
    return Rendered(prefix=prefix, suffix=suffix, excerpt_text=excerpts, pieces=pieces, segments=segments,
                    above=above)


def render_enclosing(enclosing_pieces: list[Piece], above: int, language: str, file_lines: list[str]) -> str:
    """The enclosing block up to the cursor, after the excerpts; ``above`` is the last line an
    excerpt above the block shows (-1: none), from where the gap before the block is measured."""
    out: list[str] = []
    first = enclosing_pieces[0]
    gap_start = above + 1
    if first.start_line - 1 >= gap_start and not _gap_is_blank(file_lines, gap_start, first.start_line - 1):
        out.append(elision_marker(language, gap_start, first.start_line - 1, _indent(first.text)))
    prev_end: int | None = None
    for p in enclosing_pieces:
        if prev_end is not None and p.start_line > prev_end + 1:
            out.append(elision_marker(language, prev_end + 1, p.start_line - 1, _indent(p.text)))
        out.append(p.text)
        prev_end = p.end_line
    return "".join(out)
