"""The server's copy of each open document, and positions between the editor and the wire.

LSP positions count lines split at ``\\n``, ``\\r\\n`` or ``\\r`` and columns in the negotiated
encoding's code units (UTF-16 for VS Code); the wire (``CompletionRequest``) counts lines split
at ``\\n`` and columns in characters (code points). Every conversion goes through an absolute
character offset, so a file with astral characters or old Mac line ends maps exactly.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from enum import StrEnum

from ctxpress_core.errors import CtxpressError

_LINE_END = re.compile(r"\r\n|\r|\n")


class Encoding(StrEnum):
    UTF8 = "utf-8"
    UTF16 = "utf-16"
    UTF32 = "utf-32"


class PositionError(CtxpressError, ValueError):
    """A position that is not in the document (a line past its end)."""


def _units(char: str, encoding: Encoding) -> int:
    if encoding is Encoding.UTF32:
        return 1
    code = ord(char)
    if encoding is Encoding.UTF16:
        return 2 if code > 0xFFFF else 1
    return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4


def column_from_units(line: str, units: int, encoding: Encoding) -> int:
    """Characters of ``line`` that ``units`` code units cover (past the end: the line's length,
    as LSP says; inside a character: before it)."""
    if encoding is Encoding.UTF32 or line.isascii():
        return min(units, len(line))
    seen = 0
    for index, char in enumerate(line):
        seen += _units(char, encoding)
        if seen > units:
            return index
    return len(line)


def units_from_column(line: str, column: int, encoding: Encoding) -> int:
    if encoding is Encoding.UTF32 or line.isascii():
        return column
    return sum(_units(c, encoding) for c in line[:column])


@dataclass
class Document:
    uri: str
    text: str
    version: int = 0
    language_id: str = ""
    # Line ranges (0-based, inclusive, current numbering) edited since the document was opened,
    # most recent first: the wire's ``recent_edits``.
    edits: list[tuple[int, int]] = field(default_factory=list)
    _starts: list[int] | None = None

    MAX_EDITS = 16

    def line_starts(self) -> list[int]:
        """Offsets where each LSP line starts."""
        if self._starts is None:
            self._starts = [0, *(m.end() for m in _LINE_END.finditer(self.text))]
        return self._starts

    def line_count(self) -> int:
        return len(self.line_starts())

    def line_text(self, line: int) -> str:
        starts = self.line_starts()
        end = starts[line + 1] if line + 1 < len(starts) else len(self.text)
        return self.text[starts[line]:end].rstrip("\r\n")

    def offset_at(self, line: int, units: int, encoding: Encoding) -> int:
        if line < 0 or units < 0:
            raise PositionError(f"negative position ({line}:{units})")
        starts = self.line_starts()
        if line >= len(starts):
            raise PositionError(f"line {line} is past the end of the document ({len(starts)} lines)")
        return starts[line] + column_from_units(self.line_text(line), units, encoding)

    def position_at(self, offset: int, encoding: Encoding) -> tuple[int, int]:
        """The LSP position (line, code units) of a character offset."""
        starts = self.line_starts()
        line = bisect.bisect_right(starts, offset) - 1
        return line, units_from_column(self.text[starts[line]:offset], offset - starts[line], encoding)

    def wire_position(self, offset: int) -> tuple[int, int]:
        """The wire's (line, column): lines split at ``\\n``, columns in characters."""
        line = self.text.count("\n", 0, offset)
        return line, offset - (self.text.rfind("\n", 0, offset) + 1)

    def apply(self, start: tuple[int, int] | None, end: tuple[int, int] | None, new_text: str,
              encoding: Encoding) -> None:
        """One ``didChange`` content change: a range replaced, or (no range) the whole text."""
        if start is None or end is None:
            self.text = new_text
            self._starts = None
            self.edits = [(0, max(0, self.line_count() - 1))]
            return
        a = self.offset_at(*start, encoding)
        b = self.offset_at(*end, encoding)
        if b < a:
            raise PositionError(f"change range ends before it starts ({start} > {end})")
        first = start[0]
        removed = self.text.count("\n", a, b) + self.text.count("\r", a, b) - self.text.count("\r\n", a, b)
        starts = self.line_starts()
        self.text = self.text[:a] + new_text + self.text[b:]
        self._starts = _shifted_starts(self.text, starts, first, b, len(new_text) - (b - a))
        added = len(_LINE_END.findall(new_text))
        self._record_edit(first, first + added, added - removed)

    def _record_edit(self, first: int, last: int, shift: int) -> None:
        """Keep the edited ranges in current line numbers: older ones below the edit move with it."""
        moved: list[tuple[int, int]] = []
        for a, b in self.edits:
            if a > first:
                a, b = max(first, a + shift), max(first, b + shift)
            elif b > first:
                b = max(first, b + shift)
            moved.append((a, b))
        if moved and moved[0][0] <= last + 1 and first <= moved[0][1] + 1:  # touches the latest: one range
            a, b = moved.pop(0)
            first, last = min(a, first), max(b, last)
        self.edits = [(first, last), *[r for r in moved if r != (first, last)]][:self.MAX_EDITS]


def _shifted_starts(text: str, starts: list[int], first: int, end: int, delta: int) -> list[int]:
    """The line starts of ``text`` after a change from line ``first`` up to old offset ``end``, which
    grew the text by ``delta``: only the lines around the change are scanned again (a keystroke
    costs a few lines, not the whole file). The scan starts a line early and ends past the change
    by one character, so a ``\r`` and a ``\n`` brought together or apart by it are seen."""
    keep = max(first - 1, 0)
    tail = bisect.bisect_right(starts, end + 1)
    stop = starts[tail] + delta if tail < len(starts) else len(text)
    scanned = [m.end() for m in _LINE_END.finditer(text, starts[keep], stop)]
    return [*starts[:keep + 1], *(e for e in scanned if e < stop or tail == len(starts)),
            *(s + delta for s in starts[tail:])]
