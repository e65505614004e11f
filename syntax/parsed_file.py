"""One parsed version of one file (``ParsedFile``), and parsing a source into a tree.

Lines are 0-based; byte offsets index the UTF-8 source.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from tree_sitter import Tree

from syntax.grammars import get_parser

# tree-sitter holds the GIL for a whole parse, so a large file parsed on a worker thread would
# stop the worker's event loop until it is done. Read through a callback, the parse comes back to
# Python for every chunk, where the interpreter hands the GIL to a thread that waits for it: the
# event loop waits for one chunk's parse at most.
PARSE_CHUNK_BYTES = 16 * 1024


def parse_source(language: str, source: bytes, old_tree: Tree | None = None) -> Tree:
    parser = get_parser(language)

    def read(offset: int, _point: object) -> bytes:
        return source[offset:offset + PARSE_CHUNK_BYTES]

    given: bytes | Callable[[int, object], bytes] = source if len(source) <= PARSE_CHUNK_BYTES else read
    return parser.parse(given) if old_tree is None else parser.parse(given, old_tree)


# ParsedFile.derived keys set by syntax.tree_cache. EDIT_KEY: (the previous version, start,
# old end, new end) of the one edit this version was parsed as.
EDIT_KEY = "edit-from"
# The previous version's tree with the edit applied (Tree.edit), which tree-sitter compares with
# the new tree to tell where the syntax changed (Tree.changed_ranges).
EDITED_TREE_KEY = "edited-previous-tree"


@dataclass
class ParsedFile:
    """One version of one file: its bytes, its tree and whatever was derived from that tree.

    ``derived`` lets other indexer modules memoize per-version results (the symbol table);
    a new version is a new ParsedFile, so nothing stale survives an edit.
    """

    path: str
    language: str
    source: bytes
    tree: Tree
    incremental: bool = False  # True when produced by tree.edit + re-parse of a cached tree
    derived: dict[str, object] = field(default_factory=dict)
    # The bytes the tree was parsed from when they differ from ``source``: the same bytes with
    # the cursor line blanked (see syntax.blanking). Every offset and line number holds in both.
    tree_source: bytes | None = None
    blanked_line: int | None = None
    _line_starts: list[int] | None = None

    @property
    def parsed_bytes(self) -> bytes:
        """What the tree was parsed from (the cached version compares against these)."""
        return self.tree_source if self.tree_source is not None else self.source

    @property
    def has_error(self) -> bool:
        return self.tree.root_node.has_error

    @property
    def line_starts(self) -> list[int]:
        """Byte offset of the start of every line (index = 0-based line number)."""
        if self._line_starts is None:
            self._line_starts = self._shifted_line_starts() or _line_starts_of(self.source)
        return self._line_starts

    def _shifted_line_starts(self) -> list[int] | None:
        """The predecessor's line starts moved past the edit between them (a tenth of the cost of
        finding every newline again in a 100-200 KB file), or None when they are not known."""
        edit = self.derived.get(EDIT_KEY)
        if edit is None:
            return None
        previous, start, old_end, new_end = edit
        if previous._line_starts is None and EDIT_KEY not in previous.derived:
            return None
        before = previous.line_starts  # a halfway version (see syntax.tree_cache) shifts its own first
        first = bisect.bisect_right(before, start)
        after = bisect.bisect_right(before, old_end)
        delta = new_end - old_end
        middle = _line_starts_of(self.source[start:new_end], start)[1:]
        return [*before[:first], *middle, *(s + delta for s in before[after:])]

    @property
    def line_count(self) -> int:
        return len(self.line_starts)

    def line_of(self, byte: int) -> int:
        """0-based line holding byte offset ``byte``."""
        return bisect.bisect_right(self.line_starts, byte) - 1

    def line_byte(self, line: int) -> int:
        starts = self.line_starts
        if line < 0:
            return 0
        if line >= len(starts):
            return len(self.source)
        return starts[line]

    def line_end_byte(self, line: int) -> int:
        """Offset just past the newline ending ``line`` (or end of file)."""
        return self.line_byte(line + 1)

    def text(self, start_byte: int, end_byte: int) -> str:
        return self.source[start_byte:end_byte].decode("utf-8", "replace")

    def lines_text(self, start_line: int, end_line: int) -> str:
        """Lines ``start_line..end_line`` inclusive, with their newlines."""
        return self.text(self.line_byte(start_line), self.line_end_byte(end_line))

    def cursor_byte(self, line: int, column: int) -> int:
        """Byte offset of a (0-based line, 0-based character column) position, clamped."""
        start = self.line_byte(line)
        end = self.line_end_byte(line)
        line_text = self.source[start:end].decode("utf-8", "replace").rstrip("\r\n")
        column = max(0, min(column, len(line_text)))
        return start + len(line_text[:column].encode("utf-8"))


def parse_text(text: str, language: str, path: str = "<memory>") -> ParsedFile:
    source = text.encode("utf-8")
    tree = parse_source(language, source)
    return ParsedFile(path=path, language=language, source=source, tree=tree)


def _line_starts_of(source: bytes, offset: int = 0) -> list[int]:
    starts = [offset]
    find = source.find
    pos = find(b"\n")
    while pos != -1:
        starts.append(offset + pos + 1)
        pos = find(b"\n", pos + 1)
    return starts
