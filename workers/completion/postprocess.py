"""Trim a raw model completion to what an IDE should show.

Small code models drift: they re-type the code that already follows the cursor, open a
markdown fence, or start explaining themselves in prose. Each rule below cuts the
completion at the first sign of one of these.

The completion is inserted at the cursor as returned, so its shape must fit where it lands:

- a mid-line cursor (code before and after it on its line) gets one line, and never closes a bracket
  that the rest of the line already closes;
- a cursor that opens a block or sits on a line of its own completes the block: the completion stops
  where its indentation leaves the block (Python) or where it would close the block the file already
  closes (braces), it never ends on a header whose body is missing, and a completion cut at the token
  limit goes back to its last finished statement;
- before code on the same line (a cursor at column 0 of a line that holds code), its final newline is kept;
- a line the prompt's layout taught the model (``# ... (lines 12-40 elided)``) is never code: cut before it.
"""

from __future__ import annotations

import re

from ctxpress_core.languages import BRACED_BLOCKS, INDENTED_BLOCKS
from syntax.summaries import NUMBERED_ELISION
from workers.completion.code_lines import (
    Line,
    finished,
    first_code_indent,
    function_indent,
    opens_block,
    outer_body_indent,
    read_lines,
)

_PROSE = re.compile(
    r"^\s*(Explanation|Note|Output|Example usage|This (code|function|method|will|is)|Here (is|'s)|In this)\b",
    re.IGNORECASE,
)
_SPECIAL = re.compile(r"<\|[a-z_]+\|>")
_FENCE = "```"
_CLOSING = (")", "]", "}")
# A suffix line shorter than this is too common ("}", "return") to prove a repeat.
_MIN_REPEAT_CHARS = 6
_SUFFIX_LINES_CHECKED = 3
# What an engine reports for a completion that stopped at max_tokens (the wire's finish_reason).
LENGTH = "length"


def _suffix_anchor_lines(suffix: str, cursor_at_line_start: bool) -> list[str]:
    lines = suffix.split("\n")
    # [0] is the rest of the cursor line: a whole line of code only when nothing but indentation precedes it
    if not cursor_at_line_start:
        lines = lines[1:]
    out = []
    for line in lines:
        stripped = line.strip()
        if len(stripped) >= _MIN_REPEAT_CHARS:
            out.append(stripped)
        if len(out) == _SUFFIX_LINES_CHECKED:
            break
    return out


def _cut_before(line: str, index: int, around: _Around) -> bool:
    """Does the completion end before its line ``index``? At an elision marker copied from the prompt; after the
    first line, at a line re-typing what already follows the cursor, or at prose."""
    if NUMBERED_ELISION.match(line):
        return True
    return index > 0 and (line.strip() in around.anchors or bool(_PROSE.match(line)))


def clean_completion(completion: str, suffix: str, *, prefix: str = "", language: str | None = None,
                     finish_reason: str | None = None) -> str:
    """``completion`` as the engine gave it, to what the editor inserts at the cursor. ``prefix``/``suffix``: the
    text before and after the cursor (only the cursor's line and a few lines after are looked at);
    ``finish_reason``: the engine's, ``length`` when it stopped at max_tokens."""
    text = completion
    special = _SPECIAL.search(text)
    if special:
        text = text[: special.start()]
    fence = text.find(_FENCE)
    if fence != -1:
        text = text[:fence]

    around = _Around(prefix, suffix, language)
    rest_of_line, at_line_start = around.rest_of_line, around.at_line_start
    lines = text.split("\n")
    kept: list[str] = []
    for index, line in enumerate(lines):
        if _cut_before(line, index, around):
            kept.append("")  # cut at a line's start: the lines kept end with their newline
            break
        kept.append(line)
    # The engine's limit cut the last line only if no rule above cut the text shorter.
    cut_at_limit = finish_reason == LENGTH and "\n".join(kept) == completion
    text = "\n".join(kept)

    if around.held_to_line:
        text = _hold_to_line(text, rest_of_line, language)
    elif "\n" in text or cut_at_limit:
        text = _complete_block(text, around, cut_at_limit)

    # The rest of the cursor line is already there: do not repeat it at the end. (After a mid-line cursor whose
    # line goes on with a closing bracket, _hold_to_line has settled the brackets: a closer is the completion's.)
    closers_settled = not at_line_start and rest_of_line.lstrip()[:1] in _CLOSING
    if rest_of_line.strip() and "\n" not in text and text.endswith(rest_of_line) and not closers_settled:
        text = text[: len(text) - len(rest_of_line)]
    if "\n" not in text:
        return text
    if rest_of_line.strip():
        # Code follows on the cursor's line: the completion's final newline is what keeps its last line off
        # that code. A last line of indentation only is dropped when the code brings its own.
        tail = text.rsplit("\n", 1)[1]
        if not tail.strip() and rest_of_line[:1].isspace():
            text = text[: len(text) - len(tail)]
        return text
    # Trailing blank lines are noise in a ghost-text suggestion.
    return text.rstrip()


def _hold_to_line(text: str, rest_of_line: str, language: str | None) -> str:
    """A mid-line cursor: the completion ends with its line, as editors' clients end it. On the span benchmark
    all 47 tasks with code on both sides of the cursor have a one-line answer; the model, left to go on,
    wrote past the line end into new statements (HumanEval/103). When the rest of the line starts by closing
    a bracket, the completion stops before it closes one it did not open: the rest of the line closes it."""
    text = text.split("\n", 1)[0]
    if rest_of_line.lstrip()[:1] in _CLOSING:
        line = read_lines(text, language)[0]
        if line.min_depth < 0:
            text = _before_first_unmatched_closer(text, language)
    return text


def _before_first_unmatched_closer(text: str, language: str | None) -> str:
    # read_lines already knows strings and comments. A longer head of the line reaches at least as low, so the
    # shortest head that dips below 0 is found by bisection: O(n log n) on one line.
    low, high = 1, len(text)  # text[:high] dips below 0
    while low < high:
        mid = (low + high) // 2
        if read_lines(text[:mid], language)[0].min_depth < 0:
            high = mid
        else:
            low = mid + 1
    return text[: high - 1].rstrip()


class _Around:
    """The text around the cursor as the rules read it, worked out once per request: a completion is looked at
    again at every line it writes (``CompletionSettled``), and the prefix may run to thousands of lines."""

    def __init__(self, prefix: str, suffix: str, language: str | None) -> None:
        self.prefix, self.suffix, self.language = prefix, suffix, language
        self.line_before = prefix.rsplit("\n", 1)[-1]
        self.rest_of_line = suffix.split("\n", 1)[0]
        self.at_line_start = not self.line_before.strip()
        self.held_to_line = not self.at_line_start and bool(self.rest_of_line.strip())  # a mid-line cursor
        self.anchors = frozenset(_suffix_anchor_lines(suffix, self.at_line_start))
        if self.rest_of_line.strip():  # a cursor before code on its line: that code is what follows
            self.after_indent: int | None = \
                len(self.line_before) + len(self.rest_of_line) - len(self.rest_of_line.lstrip())
        else:
            self.after_indent = first_code_indent(suffix.split("\n", 1)[1] if "\n" in suffix else "")
        self.outer_indent = outer_body_indent(prefix) if language in INDENTED_BLOCKS else None
        self._functions: dict[int, int | None] = {}  # function_indent by the block's first indentation

    def function(self, level: int) -> int | None:
        """Python: the indentation of the ``def`` of the function the cursor is in (code_lines.function_indent)."""
        if self.language not in INDENTED_BLOCKS:
            return None
        if level not in self._functions:
            self._functions[level] = function_indent(self.prefix, level)
        return self._functions[level]


class CompletionSettled:
    """Whether no more of the engine's text can change what ``clean_completion`` makes of the text so far, so the
    engine may stop: a rule has already cut it (a special token, a fence, the line a mid-line cursor is held
    to, a line re-typing the code after the cursor, prose, an elision marker, the line leaving the block). Only
    whole lines are judged: the last line, unfinished, may still grow into something else. One per request."""

    def __init__(self, suffix: str, *, prefix: str = "", language: str | None = None) -> None:
        self.around = _Around(prefix, suffix, language)

    def __call__(self, text: str) -> bool:
        if _SPECIAL.search(text) or _FENCE in text:
            return True
        if "\n" not in text:
            return False
        if self.around.held_to_line:
            return True  # held to its first line, which is whole
        whole = text[: text.rfind("\n")]
        lines = whole.split("\n")
        if any(_cut_before(line, index, self.around) for index, line in enumerate(lines)):
            return True
        return _block_extent(read_lines(whole, self.around.language), self.around) < len(lines)


def _block_extent(lines: list[Line], around: _Around) -> int:
    """How many of the completion's ``lines`` belong to the block at the cursor."""
    line_before = around.line_before
    # The first line continues the cursor's line: its indentation is the line's own.
    first_indent = len(line_before) - len(line_before.lstrip()) if line_before.strip() else \
        len(line_before) + lines[0].indent
    # Python: a line back at the indentation of the cursor's function's own ``def`` (the next method) has left it
    return _block_end(lines, first_indent, around.after_indent, around.outer_indent, around.function(first_indent),
                      around.suffix, around.language)


def _complete_block(text: str, around: _Around, cut_at_limit: bool) -> str:
    """A completion from a line start or the end of a line: the block it writes, finished."""
    language, after_indent = around.language, around.after_indent
    lines = read_lines(text, language)
    end = _block_extent(lines, around)
    limit_cut = cut_at_limit and end == len(lines)
    lines = lines[:end]
    if limit_cut and len(lines) > 1:
        # the limit cut its last line mid-way: not a statement. The first line is always kept: it goes on with
        # the line being typed, and a line cut short is still a suggestion (editors show it, accepted a word at a
        # time), where nothing at all is none.
        lines = lines[:-1]
    # Back to the last line where a statement ends and no header waits for its body. The first line is never
    # dropped for being a header: it finishes the line being typed (``def f(a, b`` + ``):``).
    while lines:
        last = max((i for i, line in enumerate(lines) if line.code), default=None)
        if last is not None and last > 0 and opens_block(lines[last], language) and not (
                after_indent is not None and after_indent > lines[last].indent):
            lines = lines[:last]  # the body would be the code after the cursor only if it were indented deeper
            continue
        if limit_cut and len(lines) > 1 and not finished(lines):
            lines = lines[:-1]
            continue
        break
    return "\n".join(line.text for line in lines)


def _block_end(lines: list[Line], first_indent: int, after_indent: int | None, outer_indent: int | None,
               function: int | None, suffix: str, language: str | None) -> int:
    """How many lines belong to the block at the cursor. Python: the lines until one dedents out of the top-level
    definition the cursor is in (below its body, below the block's first line and below the code after the
    cursor): the model has left it and writes new top-level code (``print(…)``, the next ``def``). A hole may
    span a dedent inside the definition (HumanEval/95/L1_L7 goes from an ``if`` body back to the function's),
    so only leaving the definition counts, or leaving the function the cursor is in (``function``: its ``def``
    line's indentation; a method's completion ends at the next method). Braces: the lines until one closes the
    block around the cursor when the file closes it already."""
    if language in INDENTED_BLOCKS:
        # at the end of the file (nothing after the cursor) code at any level may follow, unless it leaves the function
        floor = None if after_indent is None else \
            min(first_indent, after_indent, first_indent if outer_indent is None else outer_indent)
        for index, line in enumerate(lines[1:], start=1):
            if line.is_code and ((floor is not None and line.indent < floor)
                                 or (function is not None and line.indent <= function)):
                return index
    elif language in BRACED_BLOCKS and suffix.lstrip().startswith("}"):
        for index, line in enumerate(lines):
            if line.min_depth < 0:
                return index
    return len(lines)
