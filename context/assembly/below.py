"""Fill below: the budget packing left over goes to the lines after the enclosing block (feature ``fill_below``).

In a file of at most FILL_MAX_FILE_BUDGETS budgets those lines are appended verbatim to the FIM suffix,
in file order, where a window would show them. Longer files are filled only with what was held for it
(feature ``suffix_floor``): when the cursor's block ends soon after the cursor, the code after it gets
SUFFIX_FLOOR_SHARE of the budget, counting the block's own rest, so the model sees what follows the code it
completes (otherwise the prompt is near full with excerpts, and every token is prefill time).
"""

from __future__ import annotations

from context.assembly.state import Assembly, FitToBudget, Packed
from context.model import ContextBlock
from context.packing.pack import Candidate, Rendered
from context.packing.tokens import LineRangeTokens
from context.sources.enclosing import Enclosing
from syntax.parsed_file import ParsedFile

# Files of at most this many budgets are filled.
FILL_MAX_FILE_BUDGETS = 2.0
# Less slack than this is not worth a second rendering.
FILL_MIN_TOKENS = 24
# suffix_floor: the share of the budget the code after the cursor gets at least, where the file has it.
SUFFIX_FLOOR_SHARE = 0.125


def suffix_floor_hold(parsed: ParsedFile, enc: Enclosing, budget: int, suffix_tokens: int,
                      estimate_lines: LineRangeTokens) -> int:
    """Tokens to hold off the packing for the lines below the enclosing block (``suffix_floor``): what its own
    rest (``suffix_tokens``) leaves of the floor, in a file too long to be filled otherwise. 0: a file that is
    filled anyway, a block whose suffix is cut (nothing after it is contiguous), no lines below it, or too
    little to hold."""
    if (enc.suffix_end_line is None or enc.suffix_end_line >= parsed.line_count - 1
            or estimate_lines(0, parsed.line_count - 1) <= FILL_MAX_FILE_BUDGETS * budget):
        return 0
    hold = int(budget * SUFFIX_FLOOR_SHARE) - suffix_tokens
    return hold if hold >= FILL_MIN_TOKENS and enc.tokens + hold <= budget else 0


def fill_below(a: Assembly, packed: Packed) -> tuple[Rendered, int, list[Candidate], ContextBlock] | None:
    """Spend the budget packing left over on the lines after the enclosing block, appended to the
    FIM suffix in file order (the siblings below are the file's idioms too, and where a window
    would show them). Excerpts those lines cover verbatim (a sibling's signature) leave the
    prefix and give their tokens to the fill. Lines are taken by estimate, then the prompt is
    counted for real and trimmed until it fits. ``packed.held_below``: tokens the packing left for it
    (suffix_floor), which a file of any length gets. None: nothing to fill, or a file too long for it."""
    parsed, enc, total, budget, held = a.parsed, packed.enc, packed.total, a.budget, packed.held_below
    if (budget - total < FILL_MIN_TOKENS or enc.suffix_end_line is None
            or (not held and a.estimate_lines(0, parsed.line_count - 1) > FILL_MAX_FILE_BUDGETS * budget)):
        return None
    first, last_line = enc.suffix_end_line + 1, parsed.line_count - 1
    if first > last_line:
        return None
    slack, end = budget - total, first - 1
    kept = list(packed.chosen)

    def covered(c: Candidate, last: int) -> bool:
        return c.chosen is not None and bool(c.chosen.pieces) and all(
            first <= p.start_line and p.end_line <= last for p in c.chosen.pieces)

    while end < last_line:
        cost = a.estimate_lines(end + 1, end + 1)
        newly = [c for c in kept if covered(c, end + 1)]
        freed = sum(c.chosen.tokens for c in newly if c.chosen is not None)
        if cost > slack + freed:
            break
        end += 1
        kept = [c for c in kept if c not in newly]
        slack += freed - cost
    if end < first:
        return None
    fit = FitToBudget(budget, tries=4)
    while True:
        rendered, real = a.render(kept, enc, enc.suffix + parsed.lines_text(first, end))
        if not fit.over(real):
            break
        excess = fit.excess
        while end >= first and excess > 0:  # trim from the far end by estimate, then recount
            excess -= a.estimate_lines(end, end)
            end -= 1
        if end < first:
            return None
    if not fit.fits:
        return None
    block = ContextBlock(
        kind="below", name=f"lines below {enc.name}", start_line=first, end_line=end, form="whole",
        tokens=real - total,
        reason=(f"{held} tokens held for the code after the cursor (suffix_floor)" if held else
                f"budget left after packing, on a file of <= {FILL_MAX_FILE_BUDGETS:g} budgets")
        + f": the code after the enclosing block, verbatim ({end - first + 1} lines)")
    return rendered, real, kept, block
