"""A cheap, language-aware reading of a completion line by line: where its brackets stand, whether a line is
code (not a comment, not inside a string), whether it opens a block, whether the statement it ends is finished.

Post-processing needs these facts for every completion, so they come from one linear pass over the text
(no parse of the file: a completion is at most a few hundred characters, the file may be megabytes).
Two families: Python (indentation, ``#`` comments, triple-quoted strings, ``:`` headers) and the C-like
languages (braces, ``//`` and ``/* */`` comments, backtick template strings). Anything else is read as C-like
without block rules: brackets and strings still count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ctxpress_core.languages import INDENTED_BLOCKS

_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = frozenset(")]}")
# A code line that ends with one of these continues on the next line: the statement is not finished. A lone
# ``+``/``-`` counts, ``x++``/``x--`` do not.
_CONTINUES = re.compile(r"(\\|[=*/%&|^<>,.]|(?<![+\-])[+\-]|\b(and|or|not|in|is|lambda))$")


@dataclass(frozen=True)
class Line:
    text: str
    indent: int  # leading whitespace, in characters (a tab counts as one: completions repeat the file's own)
    code: str  # the line without comments and string bodies, stripped: what block and statement rules look at
    depth_before: int  # bracket depth at the line's start, counted from the completion's start
    depth_after: int
    min_depth: int  # the lowest depth reached on the line (below 0: it closed a bracket opened before it)
    in_string_before: bool  # the line starts inside a multi-line string (or comment)
    in_string_after: bool  # the line ends inside one: a string cut off, or a triple-quoted one still open

    @property
    def blank(self) -> bool:
        return not self.text.strip()

    @property
    def is_code(self) -> bool:
        """A line of its own statement: not blank, not a comment, not inside a string or brackets at its start."""
        return bool(self.code) and not self.in_string_before and self.depth_before <= 0


def read_lines(text: str, language: str | None) -> list[Line]:
    python = language in INDENTED_BLOCKS
    rust = language == "rust"  # 'a is a lifetime there, not a character literal
    out: list[Line] = []
    depth = 0
    quote: str | None = None  # the open string's delimiter, or "*/" inside a block comment
    for raw in text.split("\n"):
        depth_before, in_before = depth, quote is not None
        low = depth
        code: list[str] = []
        i = 0
        while i < len(raw):
            ch = raw[i]
            if quote is not None:
                if ch == "\\" and quote != "*/":
                    i += 2
                    continue
                if raw.startswith(quote, i):
                    i += len(quote)
                    quote = None
                    code.append('""')  # a string stays a value in the code the rules look at
                    continue
                i += 1
                continue
            if (python and ch == "#") or (not python and raw.startswith("//", i)):
                break
            if not python and raw.startswith("/*", i):
                quote, i = "*/", i + 2
                continue
            if python and raw.startswith(('"""', "'''"), i):
                quote, i = raw[i:i + 3], i + 3
                continue
            if ch in "\"'`" and not (rust and ch == "'") and (ch != "`" or not python):
                quote, i = ch, i + 1
                continue
            if ch in _OPENERS:
                depth += 1
            elif ch in _CLOSERS:
                depth -= 1
                low = min(low, depth)
            code.append(ch)
            i += 1
        # A one-line string left open at the line's end was cut off (or is a syntax error): it ends the line,
        # and the line is marked as ending inside it.
        cut_string = quote in ("'", '"')
        out.append(Line(raw, len(raw) - len(raw.lstrip()), "".join(code).strip(), depth_before, depth, low,
                        in_before, quote is not None))
        if cut_string:
            quote = None
    return out


def opens_block(line: Line, language: str | None) -> bool:
    """A header whose body would come on the next lines: ``…:`` in Python, ``… {`` in the C-like languages."""
    if line.in_string_after:
        return False
    if language in INDENTED_BLOCKS:
        return line.depth_after <= line.depth_before and line.code.endswith(":")
    return line.code.endswith("{")


def finished(lines: list[Line]) -> bool:
    """Whether ``lines`` end where a statement ends: no bracket left open, no string open, the last code line not
    continued (``\\``, a trailing operator). Blocks are ``opens_block``'s question, asked separately."""
    code = [line for line in lines if line.code or line.in_string_after]
    if not code:
        return True
    last = code[-1]
    return last.depth_after <= 0 and not last.in_string_after and not _CONTINUES.search(last.code)


def first_code_indent(text: str) -> int | None:
    """The indentation of the first non-blank line of ``text`` (the code that follows the cursor), or None."""
    for line in text.split("\n"):
        if line.strip():
            return len(line) - len(line.lstrip())
    return None


# How far back outer_body_indent looks: a definition longer than this is read as if it had no header.
_OUTER_LOOKBACK_LINES = 400


def outer_body_indent(prefix: str) -> int | None:
    """The indentation of the body of the top-level definition (Python) that the cursor is in: the first indented
    line after the nearest line at column 0 that opens a block. None at top level or past the look-back."""
    lines = prefix.split("\n")[-_OUTER_LOOKBACK_LINES:]
    for at in range(len(lines) - 2, -1, -1):  # the cursor's own line is the last: it is the body, not a header
        line = lines[at]
        if line[:1].isspace() or not line.rstrip().endswith(":"):
            continue
        for body in lines[at + 1:]:
            if body.strip():
                indent = len(body) - len(body.lstrip())
                return indent or None
        return None
    return None


def function_indent(prefix: str, level: int) -> int | None:
    """The indentation of the ``def`` line of the innermost Python function whose body holds the cursor's line,
    indented ``level``: a line the completion writes at that indentation or less has left the function. None
    outside a function (at top level, in a class body) or past the look-back."""
    lines = read_lines("\n".join(prefix.split("\n")[-_OUTER_LOOKBACK_LINES:]), "python")
    for line in reversed(lines[:-1]):  # the cursor's own line is the last
        if not line.is_code or line.indent >= level:
            continue  # a continuation line, a comment, or a statement of the same body
        if line.code.startswith(("def ", "async def ")):
            return line.indent
        if line.code.startswith("class ") or line.indent == 0:
            return None
        level = line.indent  # an if/for/with/try around the cursor: the function is further out
    return None
