"""Which excerpts go beside the enclosing block: every source's candidates, one packing pass in priority order,
the rendered prompt counted for real and the lowest-priority blocks shed until it fits, then the dropped ones
offered the slack that the real count left."""

from __future__ import annotations

import re
from collections.abc import Sequence

from context.assembly.below import suffix_floor_hold
from context.assembly.state import Assembly, AssemblyFailed, FitToBudget, Packed
from context.packing.pack import TIER_REFERENCED, Candidate, form_tokens, merge_duplicates, pack
from context.sources.class_header import class_header_candidates
from context.sources.enclosing import Enclosing, find_enclosing
from context.sources.imports import import_candidates
from context.sources.nearby import nearby_candidates
from context.sources.neighbours import neighbour_candidates
from context.sources.recent_edits import recent_edit_candidates
from context.sources.references import referenced_candidates
from context.sources.similar import similar_candidates
from syntax.summaries import Outline

# One referenced/edited block may take at most this share of the budget whole; beyond that its
# summary is used, so that one large helper cannot crowd out every other signature.
MAX_WHOLE_SHARE = 0.25
# With the nearby_first feature: the share of the budget held back for the code above the block
# while the class header, references, edits and imports are packed (they keep their order and
# report, but take whole bodies only from what is left; cheap signatures still fit).
NEARBY_FIRST_SHARE = 0.6
# Dropped blocks retried against the real rendered count (at most one render and count each).
SECOND_CHANCE_MAX = 6


def pack_beside(a: Assembly) -> Packed:
    """The enclosing block and the excerpts that fit beside it, less what the suffix floor holds for the lines
    below the block (``Packed.held_below``). An enclosing block cut to the budget may still leave the rendered
    prompt over it (markers, merges): it is cut again by the excess, at most three times."""
    fit, enclosing_budget = FitToBudget(a.budget, tries=3), a.budget
    while True:
        packed = _pack(a, enclosing_budget)
        if not fit.over(packed.total + packed.held_below):  # the tokens held below are not the excerpts'
            break
        enclosing_budget = max(1, enclosing_budget - fit.excess - a.marker_tokens)
    if not fit.fits and not packed.chosen:
        raise AssemblyFailed("block-over-budget", f"the cursor's block alone takes {packed.total} tokens of a "
                                                  f"{a.budget - packed.held_below}-token budget")
    return packed


def _pack(a: Assembly, enclosing_budget: int) -> Packed:
    """The enclosing block cut to ``enclosing_budget``, and the excerpts packed beside it."""
    enc = find_enclosing(a.outline, a.line, a.cursor_byte, enclosing_budget, a.count_tokens, a.marker_tokens)
    held_below = 0
    if a.options.fill_below and a.options.suffix_floor:
        held_below = suffix_floor_hold(a.parsed, enc, a.budget, a.exact(enc.suffix), a.estimate_lines)
    budget = a.budget - held_below  # the excerpts' share
    remaining = budget - enc.tokens - a.marker_tokens
    candidates, reserve = _candidates_beside(a, enc, remaining, budget)
    a.clock.check("candidates")
    result = pack(candidates, max(0, remaining), a.exact, a.marker_tokens,
                  max_whole_tokens=int(budget * MAX_WHOLE_SHARE), shown=enc.shown_ranges,
                  estimate_lines=a.estimate_lines, reserve=reserve)
    packed = _shed(a, enc, result.chosen, result.dropped, budget)
    a.clock.check("pack")
    _second_chance(a, packed, budget)
    a.clock.check("second-chance")
    packed.held_below = held_below
    return packed


def _candidates_beside(a: Assembly, enc: Enclosing, remaining: int, budget: int) -> tuple[list[Candidate], int]:
    """Every source's candidates for the room ``remaining`` beside ``enc``, and the tokens held for the nearby
    lines (nearby_first)."""
    candidates = _candidates(a.outline, enc, a.line, a.options.recent_edit_lines, a.options.constructor_attributes)
    if a.options.similar:
        candidates += similar_candidates(a.parsed, a.line, a.column, enc.shown_ranges, a.estimate_lines,
                                         a.marker_tokens)
    nearby = nearby_candidates(a.outline, enc, a.estimate_lines, max(0, remaining), a.marker_tokens)
    reserve = 0
    if a.options.nearby_first and nearby:
        # Measured on the long-file eval: the window-like lines above the block are worth more
        # to a small model than whole bodies of helpers; their signatures still go in first.
        # The reserve never takes the room of the class head's and references' cheapest forms.
        signatures = sum(form_tokens(c.forms[-1], a.exact, a.marker_tokens, a.estimate_lines)
                         for c in candidates if c.tier <= TIER_REFERENCED)
        fits = [f.tokens for f in nearby[0].forms if f.tokens <= int(budget * NEARBY_FIRST_SHARE)]
        reserve = max(0, min(max(fits, default=0), remaining - signatures))
        nearby[0].reason += f"; {reserve} tokens held for it (nearby_first)"
    candidates += nearby
    if not a.options.summaries:  # ablation: a block goes in whole or not at all
        candidates = [c for c in candidates if _drop_summary_forms(c)]
    return candidates, reserve


def _shed(a: Assembly, enc: Enclosing, chosen: list[Candidate], dropped: list[Candidate], budget: int) -> Packed:
    """The rendered prompt counted exactly (by memoised segments: see packing/tokens.py), the lowest-priority
    blocks shed until it fits."""
    fit = FitToBudget(budget)
    while True:
        rendered, total = a.render(chosen, enc)
        if not (fit.over(total) and chosen):
            return Packed(enc, chosen, dropped, rendered, total)
        victim = max(chosen, key=lambda c: c.priority)
        chosen.remove(victim)
        victim.drop_reason = f"shed after rendering: prompt was {total} tokens > budget {budget}"
        dropped.append(victim)


def _second_chance(a: Assembly, packed: Packed, budget: int) -> None:
    """The estimate is pessimistic (a marker per piece): offer the slack of the real count to the dropped
    blocks, by their estimates and in priority order, then verify with a real count; while that is over
    the budget, the lowest-priority block added goes back out (not all of them: one that does not fit
    must not keep out those that do)."""
    slack = budget - packed.total
    added: list[Candidate] = []
    for cand in sorted(packed.dropped, key=lambda c: c.priority)[:SECOND_CHANCE_MAX]:
        fitting = [f for f in cand.forms if f.tokens and f.tokens - a.marker_tokens <= slack]
        if fitting:
            cand.chosen = fitting[0]
            slack -= fitting[0].tokens - a.marker_tokens
            added.append(cand)
    fit = FitToBudget(budget)
    while added:
        trial, total = a.render([*packed.chosen, *added], packed.enc)
        if not fit.over(total):
            packed.chosen += added
            for cand in added:
                packed.dropped.remove(cand)
            packed.rendered, packed.total = trial, total
            return
        added.pop().chosen = None


def _drop_summary_forms(candidate: Candidate) -> bool:
    candidate.forms = [f for f in candidate.forms if f.name != "summary"]
    return bool(candidate.forms)


def _candidates(
    outline: Outline, enc: Enclosing, line: int, recent_edit_lines: Sequence[tuple[int, int]], attributes: bool
) -> list[Candidate]:
    parsed = outline.parsed
    sym = enc.symbol
    out: list[Candidate] = []
    header = class_header_candidates(outline, line, sym, attributes=attributes)
    out += header
    covered = [(p.start_line, p.end_line) for c in header for p in c.forms[0].pieces]
    # References: from what the model will see of the enclosing block, nearest the cursor first.
    start = min(a for a, _ in enc.shown_ranges)
    end = max(b for _, b in enc.shown_ranges)
    region = (parsed.line_byte(start), parsed.line_end_byte(end))
    refs = [c for c in referenced_candidates(outline, region, line, sym)
            if not any(a <= c.start_line and c.end_line <= b for a, b in covered)]
    out += refs
    out += recent_edit_candidates(outline, recent_edit_lines, line)
    referenced_idx = {int(c.key.split(":")[1]) for c in refs if c.key.startswith("sym:")}
    used_names = set(parsed.text(*region).replace(".", " ").split()) if region[1] - region[0] < 200_000 else set()
    out += import_candidates(outline, _identifier_words(used_names), referenced_idx)
    out += neighbour_candidates(outline, line, sym, referenced_idx)
    return merge_duplicates(out)


def _identifier_words(tokens: set[str]) -> set[str]:
    words: set[str] = set()
    for tok in tokens:
        words.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", tok))
    return words
