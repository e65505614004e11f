"""A Python constructor's summary that keeps the instance attributes it sets (``self.name = value``).

A method's completion often names an attribute that only the constructor introduces, far above the
cursor; the constructor's plain summary (signature and ``...``) hides every one of them. This form keeps
the signature and, under it, the first assignment of each attribute: with its value when that fits one
short line, ``...`` for the value otherwise. Other languages declare their fields apart from the
constructor (the enclosing class's field declarations are shown for them).
"""

from __future__ import annotations

import re

from syntax.blanking import unmatched_brackets
from syntax.parsed_file import ParsedFile
from syntax.summaries import PY_ELISION, header_text, python_head_lines
from syntax.symbols.model import Symbol

# Past these, the rest of the attributes are elided with the body (the form must stay a summary).
MAX_ATTRIBUTES = 40
MAX_VALUE_CHARS = 60
MAX_BODY_LINES = 2000

_ASSIGNMENT = re.compile(r"\s*self\.([A-Za-z_]\w*)\s*(:\s*[^=]+?)?\s*=(?!=)\s*(.*)$")


def _without_comment(line: str) -> str:
    """``line`` without a trailing comment (two spaces, then ``#``), unless the ``#`` may be inside a string."""
    code, hash_, _comment = line.partition("  #")
    if hash_ and code.count('"') % 2 == 0 and code.count("'") % 2 == 0:
        return code.rstrip()
    return line


def _one_line_value(value: str) -> str | None:
    """The value as written when it is complete on its line and short; None otherwise."""
    value = _without_comment(value).rstrip()
    if not value or value.endswith("\\") or len(value) > MAX_VALUE_CHARS:
        return None
    closers, opened = unmatched_brackets(value.encode(), "python")
    if closers or opened or value.count('"""') % 2 or value.count("'''") % 2:
        return None
    return value


def _without_comments(header: str) -> str:
    """The signature without its comment lines and trailing comments (``# type: ignore`` on each parameter):
    what it costs is better spent on the attributes."""
    return "\n".join(_without_comment(line) for line in header.splitlines() if not line.lstrip().startswith("#"))


def constructor_attributes(parsed: ParsedFile, sym: Symbol) -> str | None:
    """The constructor's signature, docstring line and attribute assignments, then ``...``; None when it
    is not a Python block or sets no attribute."""
    if parsed.language != "python" or sym.body_start_byte is None:
        return None
    body_line = parsed.line_of(sym.body_start_byte)
    last = min(sym.end_line, body_line + MAX_BODY_LINES)
    seen: dict[str, str] = {}
    for text in parsed.lines_text(body_line, last).splitlines():
        match = _ASSIGNMENT.match(text)
        if match is None:
            continue
        name, annotation, value = match.group(1), match.group(2), match.group(3)
        if name in seen:
            continue
        shown = _one_line_value(value)
        typed = f": {annotation[1:].strip()}" if annotation else ""
        seen[name] = f"self.{name}{typed} = {shown if shown is not None else PY_ELISION}"
        if len(seen) == MAX_ATTRIBUTES:
            break
    if not seen:
        return None
    lines, body_indent = python_head_lines(parsed, sym, _without_comments(header_text(parsed, sym)))
    lines += [f"{body_indent}{line}" for line in seen.values()]
    lines.append(f"{body_indent}{PY_ELISION}")
    return "\n".join(lines) + "\n"
