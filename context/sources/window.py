"""The baseline context: a +-N-line sliding window around the cursor, as FIM prefix/suffix.

This is what the seed measured against, and ``mode=baseline`` keeps it unchanged
forever so that every optimisation has a fixed yardstick. When the window exceeds the
token budget, whole lines are dropped from the far ends: the prefix keeps three
quarters of the budget, the suffix the rest (code before the cursor matters more).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from context.packing.tokens import take_while_fits
from ctxpress_core.errors import CursorOutOfRange

PREFIX_SHARE = 0.75


@dataclass(frozen=True)
class Window:
    prefix: str
    suffix: str
    start_line: int  # first line in the window (0-based)
    end_line: int  # last line in the window (0-based, inclusive)
    truncated: bool  # the token budget cut lines from the window
    tokens: int


def _cursor_lines(text: str) -> list[str]:
    """Lines of the file with their endings, and the empty line after a trailing newline (a
    valid cursor position: the end of the file)."""
    parts = text.split("\n")  # the wire's lines (see ctxpress_core.wire.v1.wire_lines)
    return [part + "\n" for part in parts[:-1]] + [parts[-1]]


def clamp_cursor(text: str, line: int, column: int) -> tuple[int, int]:
    """The nearest valid cursor position (for callers that degrade rather than reject)."""
    lines = _cursor_lines(text)
    line = max(0, min(line, len(lines) - 1))
    return line, max(0, min(column, len(_body(lines[line]))))


def _body(line: str) -> str:
    """A line without its ending (``\n`` or ``\r\n``, as the wire counts them): a lone ``\r`` is content."""
    return line.removesuffix("\n").removesuffix("\r")


def split_at_cursor(text: str, line: int, column: int) -> tuple[list[str], str, str]:
    """Lines of the file (with their endings) and the cursor line cut in two."""
    lines = _cursor_lines(text)
    if line >= len(lines):
        raise CursorOutOfRange(f"line {line} is past the end of the file ({len(lines)} lines)")
    current = lines[line]
    body = _body(current)
    if column > len(body):
        raise CursorOutOfRange(f"column {column} is past the end of line {line} ({len(body)} characters)")
    return lines, current[:column], current[column:]


def baseline_window(
    text: str,
    line: int,
    column: int,
    *,
    count_tokens: Callable[[str], int],
    window_lines: int = 200,
    budget_tokens: int = 1024,
    start_grid: int = 1,
) -> Window:
    """``start_grid``: the window's first line is a multiple of it (lines are left out of the prefix until it
    is, and the suffix gets their tokens): the prompts of a developer typing on then start alike, and the engine
    keeps their shared start cached. 1: the baseline's window, its prefix filled up to its share."""
    lines, before, after = split_at_cursor(text, line, column)
    first = max(0, line - window_lines)
    last = min(len(lines) - 1, line + window_lines)
    above = lines[first:line]
    below = lines[line + 1 : last + 1]

    prefix_budget = int(budget_tokens * PREFIX_SHARE)
    used_before = count_tokens(before)
    used_after = count_tokens(after)

    kept_above, used_before, cut_above = take_while_fits(reversed(above), prefix_budget, used_before, count_tokens)
    kept_above.reverse()
    start = line - len(kept_above)
    if start_grid > 1 and start % start_grid:
        drop = min(len(kept_above), start_grid - start % start_grid)
        used_before -= sum(count_tokens(kept) for kept in kept_above[:drop])
        kept_above, cut_above = kept_above[drop:], cut_above or drop > 0
    # The suffix gets what the prefix left over, so a short prefix does not waste budget.
    kept_below, used_after, cut_below = take_while_fits(below, budget_tokens - used_before, used_after,
                                                        count_tokens)
    truncated = cut_above or cut_below

    return Window(
        prefix="".join(kept_above) + before,
        suffix=after + "".join(kept_below),
        start_line=line - len(kept_above),
        end_line=line + len(kept_below),
        truncated=truncated,
        tokens=used_before + used_after,
    )


# A line longer than this is minified or generated code: nothing to parse or search for the context,
# and each pass over it (parsing, tokenizing, regexes) costs in proportion to its length.
MAX_LINE_CHARS = 4_000
CURSOR_BEFORE_CHARS = 2_000  # what of such a cursor line is kept: the code just before the cursor ...
CURSOR_AFTER_CHARS = 500  # ... and just after it
OTHER_LINE_CHARS = 200  # any other long line keeps its start


def longest_line(text: str) -> int:
    return max(map(len, text.split("\n")), default=0)


def clip_long_lines(text: str, line: int, column: int) -> tuple[str, int]:
    """``text`` with every line over ``MAX_LINE_CHARS`` cut (the cursor line around the cursor), and the
    cursor's column in it; line numbers are unchanged."""
    lines = text.split("\n")
    for i, current in enumerate(lines):
        if len(current) <= MAX_LINE_CHARS:
            continue
        if i == line:
            start = max(0, column - CURSOR_BEFORE_CHARS)
            lines[i] = current[start:column + CURSOR_AFTER_CHARS]
            column -= start
        else:
            lines[i] = current[:OTHER_LINE_CHARS]
    return "\n".join(lines), column
