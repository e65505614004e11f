"""Language detection, tree-sitter parsers and a per-file-version parse-tree cache.

The completion hot path re-parses the same file on every keystroke, so trees are kept per
file and updated incrementally: the new text is diffed against the cached one (common
prefix/suffix, compared with memcmp-speed slicing), the old tree is told about the edit with
``Tree.edit`` and tree-sitter re-parses only what changed (~1 ms for a one-line edit of a
2,600-line file, against ~10 ms cold).
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import AnyStr

from tree_sitter import Parser, Point, Tree
from tree_sitter_language_pack import get_parser as _pack_parser

from ctxpress.core.languages import language_from_path

# Languages with block cropping. Names are tree-sitter-language-pack grammar names.
SUPPORTED_LANGUAGES: frozenset[str] = frozenset(
    {"python", "javascript", "typescript", "tsx", "go", "java", "rust", "c", "cpp"}
)

# Line-comment syntax, used for elision markers in the assembled prompt.
LINE_COMMENT: dict[str, str] = {
    "python": "#",
    "javascript": "//",
    "typescript": "//",
    "tsx": "//",
    "go": "//",
    "java": "//",
    "rust": "//",
    "c": "//",
    "cpp": "//",
}

def detect_language(path: str, text: str | None = None) -> str | None:
    """The grammar for ``path`` (``ctxpress.core.languages``: a ``.h`` showing C++ constructs is cpp), or
    None when there is none."""
    language = language_from_path(path, text)
    return language if language in SUPPORTED_LANGUAGES else None


def is_supported(language: str | None) -> bool:
    return language is not None and language in SUPPORTED_LANGUAGES


_local = threading.local()


def get_parser(language: str) -> Parser:
    """A parser for ``language``, one per thread (tree-sitter parsers are not thread-safe)."""
    parsers: dict[str, Parser] | None = getattr(_local, "parsers", None)
    if parsers is None:
        parsers = {}
        _local.parsers = parsers
    parser = parsers.get(language)
    if parser is None:
        if language not in SUPPORTED_LANGUAGES:
            raise ValueError(f"unsupported language: {language!r}")
        parser = _pack_parser(language)  # type: ignore[arg-type]
        parsers[language] = parser
    return parser


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
    # the cursor line blanked (see blank_line_bytes). Every offset and line number holds in both.
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
        before = previous.line_starts  # a halfway version (see TreeCache._parse) shifts its own first
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


def blank_line_bytes(source: bytes, start: int, end: int, language: str, in_brackets: bool = False) -> bytes:
    """``source`` with the code of the line at bytes start..end replaced, byte for byte, by spaces
    (so every offset and line number still holds).

    The cursor line is the one being typed: cut mid-expression or inside an unclosed string, it
    sends tree-sitter's error recovery over the rest of the file (measured: 10-50 ms re-parses of
    2,000-5,000-line files, against ~1 ms for a clean one-line edit) and can wreck the structure
    that assembly needs. The line itself is shown from the real text. In Python a statement line
    keeps a one-character statement (``_``): a block still reaches a line that ends it, and
    (measured) tree-sitter re-parses a whitespace-only line's later restoration ~10x slower; a
    line ``in_brackets`` (continuing a call, a literal, an import list) is all spaces, where
    ``_`` would be an error.

    What the line does for the lines around it stays: the brackets it closes for the lines above
    (``)`` ending a call; ``} else {`` in brace languages); in Python a line with a triple quote (a
    docstring's first or last line) is kept whole, and a line opening an indented block stays a
    block header: ``def``/``class`` and clauses like ``except`` as they are, any other as ``if _:``.
    Blanked, those did to the rest of the file what half-typed code does (measured on random
    cursors in SQLAlchemy files: 40-130 ms re-parses at docstring lines, p95 42 -> 8 ms).
    """
    if end > start and source[end - 1 : end] == b"\n":
        end -= 1
    if end > start and source[end - 1 : end] == b"\r":
        end -= 1
    line = source[start:end]
    indent = len(line) - len(line.lstrip(b" \t"))
    width = end - start - indent
    python = language == "python"
    quote, state = _unterminated_triple_quote(source, start, end) if python else (b"", "")
    if width <= 0 and state != "inside":
        return source
    code = line[indent:]
    if python:
        if state == "inside" and end - start >= len(quote):
            # The line is inside a triple-quoted string opened above and never closed (a docstring
            # being typed): the string would run to the end of the file and turn every later
            # string inside out (measured: every request of a docstring typed into a 2,900-line
            # file past the 20 ms budget). Closed at this line, the rest of the file is code again.
            # At the line's start, so that typing on the line only widens the spaces after it.
            return source[:start] + quote + b" " * (end - start - len(quote)) + source[end:]
        if state != "opens" and (b'"""' in code or b"'''" in code):
            return source
    if width <= 0:
        return source
    closers, opened = _unmatched_brackets(code, language)
    filler = bytearray(b" " * width)
    if closers:
        # The line ends what lines above opened; in brace languages a ``{`` it opens again
        # (``} else {``) stays too. A line that only opens brackets is blanked: that is how
        # half-typed code looks (``foo(a,``).
        kept = closers if python else closers + [at for at in opened if code[at] == ord("{")]
        for at in kept:
            filler[at] = code[at]
    elif python and not in_brackets:
        if not opened and _indented_below(source, end, indent):
            # The line opens a block. A declaration keeps its real header (the symbol table needs
            # it), so does a clause that only follows another (an ``except`` alone is an error);
            # any other header, whole or half typed, stands in as ``if _:``, which always parses.
            word = (code.split(None, 1) or [b""])[0].split(b"(", 1)[0].rstrip(b":")
            if word in _PY_KEPT_HEADERS:
                return source
            if width < len(_PY_HEADER):
                if _indent_of_line_above(source, start) >= _indent_of_line_below(source, end):
                    # Too short for a header, and dedented inside a block that goes on below
                    # (``x`` typed at column 0 of an empty line in a method): kept, it would end
                    # the method and the class; blank, the block stays what it was (measured:
                    # 16-21 ms re-parses of a 2,300-line file with it kept).
                    return source[: start + indent] + b" " * width + source[end:]
                return source
            filler[: len(_PY_HEADER)] = _PY_HEADER
        else:
            filler[0] = ord("_")
    return source[: start + indent] + bytes(filler) + source[end:]


def _unterminated_triple_quote(source: bytes, start: int, end: int) -> tuple[bytes, str]:
    """Is the line at ``start..end`` part of a Python triple-quoted string that is never closed?
    ("opens": the line opens it; "inside": a line above did; "": neither.) By parity: a file
    with an odd number of one kind of triple quote has one string left open, and the quotes
    before the line say whether it began before it. Quotes inside other strings or comments
    fool the count; then the line is parsed as before (kept whole when it holds a quote)."""
    for quote in (b'"""', b"'''"):
        total = source.count(quote)
        if total % 2 == 0:
            continue
        in_line = source.count(quote, start, end)
        before = source.count(quote, 0, start)
        if in_line % 2 == 1 and before % 2 == 0:
            return quote, "opens"
        if in_line == 0 and before % 2 == 1:
            return quote, "inside"
    return b"", ""


_PY_HEADER = b"if _:"
_PY_KEPT_HEADERS = frozenset({b"def", b"class", b"async", b"except", b"except*", b"finally", b"case"})


_OPENERS = frozenset(b"([{")
_CLOSERS = frozenset(b")]}")


def _unmatched_brackets(code: bytes, language: str) -> tuple[list[int], list[int]]:
    """Offsets in ``code`` of closing brackets whose opener is on an earlier line, and of the
    brackets the line leaves open; string literals and Python comments skipped (escapes across
    lines and multi-line strings are not worth a tokenizer here)."""
    opened: list[int] = []
    closers: list[int] = []
    quote, i = 0, 0
    while i < len(code):
        ch = code[i]
        if quote:
            if ch == 92:  # backslash
                i += 1
            elif ch == quote:
                quote = 0
        elif ch in (34, 39):  # " '
            quote = ch
        elif ch == 35 and language == "python":  # '#'
            break
        elif ch in _OPENERS:
            opened.append(i)
        elif ch in _CLOSERS:
            if opened:
                opened.pop()
            else:
                closers.append(i)
        i += 1
    return closers, opened


def _indent_of_line_above(source: bytes, start: int) -> int:
    """Indentation of the nearest non-blank line before the line starting at ``start`` (-1: none)."""
    end = start - 1
    while end > 0:
        begin = source.rfind(b"\n", 0, end) + 1
        line = source[begin:end]
        if line.strip():
            return len(line) - len(line.lstrip(b" \t"))
        end = begin - 1
    return -1


def _indent_of_line_below(source: bytes, end: int) -> int:
    """Indentation of the nearest non-blank line after the line ending at ``end`` (-1: none)."""
    pos = source.find(b"\n", end)
    while pos != -1:
        nxt = source.find(b"\n", pos + 1)
        following = source[pos + 1 : nxt if nxt != -1 else len(source)]
        if following.strip():
            return len(following) - len(following.lstrip(b" \t"))
        pos = nxt
    return -1


def _indented_below(source: bytes, end: int, indent: int) -> bool:
    """Is the next non-blank line after byte ``end`` indented deeper than ``indent``? Then the
    line at ``end`` opens a block, and blanked it would leave an unexpected indent."""
    pos = source.find(b"\n", end)
    while pos != -1:
        nxt = source.find(b"\n", pos + 1)
        following = source[pos + 1 : nxt if nxt != -1 else len(source)]
        stripped = following.lstrip(b" \t")
        if stripped.strip():
            return len(following) - len(stripped) > indent
        pos = nxt
    return False


# Python nodes whose lines after the first continue one logical line.
_PY_BRACKETS = frozenset({
    "argument_list", "parenthesized_expression", "list", "dictionary", "set", "tuple", "subscript",
    "parameters", "list_comprehension", "dictionary_comprehension", "set_comprehension",
    "generator_expression", "import_from_statement", "type_parameter", "string",
})
_CONTINUES = (b"(", b"[", b"{", b",", b"\\")


def _continues_line(versions: tuple[ParsedFile | None, ...], source: bytes, start: int) -> bool:
    """Does the Python line at ``start`` continue the logical line above it? From the tree of the
    first of ``versions`` (the previous one, then the one the file was opened at) in which
    everything up to this line is as it is now (the usual case: the same line typed on, the first
    keystroke after the file was opened, a new cursor in a file unchanged since), else from the text."""
    for version in versions:
        if version is None or start > len(version.parsed_bytes) or version.parsed_bytes[:start] != source[:start]:
            continue
        node = version.tree.root_node.descendant_for_byte_range(start, start)
        while node is not None:
            if node.type in _PY_BRACKETS and node.start_byte < start:
                return True
            node = node.parent
        return False
    above = source[:start].rstrip()
    return above.endswith(_CONTINUES) or source[start:start + 200].lstrip()[:1] in (b")", b"]", b"}")


def common_prefix_len(a: AnyStr, b: AnyStr) -> int:
    """Length of the longest common prefix of two texts (bytes or str)."""
    # Binary search over slice equality: O(n log n) in C memcmp instead of a Python loop.
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def diff_region(old: AnyStr, new: AnyStr) -> tuple[int, int, int]:
    """The one region where ``new`` differs from ``old`` (bytes or str): (start, end in old, end
    in new), from their common prefix and suffix."""
    start = common_prefix_len(old, new)
    tail = common_suffix_len(old, new, min(len(old), len(new)) - start)
    return start, len(old) - tail, len(new) - tail


def common_suffix_len(a: AnyStr, b: AnyStr, limit: int) -> int:
    """Length of the longest common suffix of two texts, at most ``limit`` (bytes or str)."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid :] == b[len(b) - mid :]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _line_starts_of(source: bytes, offset: int = 0) -> list[int]:
    starts = [offset]
    find = source.find
    pos = find(b"\n")
    while pos != -1:
        starts.append(offset + pos + 1)
        pos = find(b"\n", pos + 1)
    return starts


def _line_bounds(source: bytes, line: int) -> tuple[int, int] | None:
    """(start, end) bytes of 0-based ``line``, end past its newline; None past the last line."""
    parts = source.split(b"\n", line)  # C speed: a fifth of a find() loop's time
    if len(parts) <= line:
        return None
    start = len(source) - len(parts[-1])
    end = source.find(b"\n", start)
    return start, (end + 1 if end != -1 else len(source))


def _point_at(source: bytes, offset: int) -> Point:
    row = source.count(b"\n", 0, offset)
    line_start = source.rfind(b"\n", 0, offset) + 1
    return Point(row, offset - line_start)


def parse_text(text: str, language: str, path: str = "<memory>") -> ParsedFile:
    source = text.encode("utf-8")
    tree = parse_source(language, source)
    return ParsedFile(path=path, language=language, source=source, tree=tree)


EDIT_KEY = "edit-from"
# The previous version's tree with the edit applied (Tree.edit), which tree-sitter compares with
# the new tree to tell where the syntax changed (Tree.changed_ranges).
EDITED_TREE_KEY = "edited-previous-tree"


# A new cursor line is parsed as one edit of the version the file was opened at (its base) when
# all that differs from it lies within this many bytes: the cursor line alone, or a block typed
# since the file was opened (see TreeCache.get).
MAX_BASE_EDIT_BYTES = 4096


class TreeCache:
    """LRU cache of the latest parsed version of each file, updated incrementally.

    Keyed by path; a request for a different text of the same path edits the cached tree
    (one contiguous edit covering every difference) and re-parses with it as ``old_tree``.
    """

    def __init__(self, max_files: int = 256) -> None:
        self._max_files = max_files
        self._entries: OrderedDict[tuple[str, str], ParsedFile] = OrderedDict()
        # The last version of each file parsed as it is (no blanked line: warmed on file_opened): a
        # request at a new cursor of a file otherwise unchanged since is one edit away from it,
        # where the latest version is two (its own blanked line back, the new one blanked); so is
        # a new line of a block typed since (from the latest version, the previous cursor line's
        # stand-in turning back into code re-parsed the rest of the file: 12-20 ms at each new
        # line of a docstring typed into a 4,000-line file, ~2 ms from the base).
        self._bases: dict[tuple[str, str], ParsedFile] = {}
        self.from_base = 0
        self._lock = threading.Lock()
        self._file_locks: dict[tuple[str, str], threading.Lock] = {}
        self.hits = 0
        self.incremental_parses = 0
        self.full_parses = 0
        self.shifted_without_parse = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, path: str, text: str, language: str, blank_line: int | None = None) -> ParsedFile:
        """The parsed version of ``text``; with ``blank_line``, its tree is that of the text with
        that line blanked (see blank_line_bytes) while ``source`` stays the real text."""
        source = text.encode("utf-8")
        tree_source = source
        bounds = _line_bounds(source, blank_line) if blank_line is not None else None
        key = (path, language)
        with self._lock:
            file_lock = self._file_locks.setdefault(key, threading.Lock())
            previous = self._entries.get(key)
            base = self._bases.get(key)
        if blank_line is not None and bounds is not None:
            in_brackets = language == "python" and _continues_line((previous, base), source, bounds[0])
            tree_source = blank_line_bytes(source, bounds[0], bounds[1], language, in_brackets)
        # One parse per file at a time: in-file assembly and the retrieval query ask for the same
        # version at once, and the second should find it rather than parse it again.
        with file_lock:
            return self._get_locked(key, path, source, tree_source, language, blank_line, bounds)

    def _get_locked(self, key: tuple[str, str], path: str, source: bytes, tree_source: bytes, language: str,
                    blank_line: int | None, bounds: tuple[int, int] | None = None) -> ParsedFile:
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None:
                self._entries.move_to_end(key)
        if cached is not None and cached.source == source and cached.parsed_bytes == tree_source:
            self.hits += 1
            return cached
        if cached is not None and cached.parsed_bytes == tree_source:
            # Only the blanked line's own text changed: same tree, same symbols (an empty edit).
            self.hits += 1
            parsed = ParsedFile(path, language, source, cached.tree, incremental=True)
            at = cached.line_byte(blank_line) if blank_line is not None else 0
            cached.derived.pop(EDIT_KEY, None)
            cached.derived.pop(EDITED_TREE_KEY, None)
            parsed.derived[EDIT_KEY] = (cached, at, at, at)
        else:
            base = self._bases.get(key)
            region = None
            if (bounds is not None and base is not None and cached is not None and base is not cached
                    and cached.blanked_line != blank_line and base.tree_source is None):
                region = _edit_region(base.parsed_bytes, tree_source, MAX_BASE_EDIT_BYTES)
            if region is not None:
                parsed = self._from_base(path, language, base, tree_source, region)
            else:
                parsed = self._parse(path, tree_source, language, cached)
        if tree_source is not source:
            parsed.source, parsed.tree_source, parsed.blanked_line = source, tree_source, blank_line
        with self._lock:
            self._entries[key] = parsed
            self._entries.move_to_end(key)
            if blank_line is None:
                self._bases[key] = parsed
            while len(self._entries) > self._max_files:
                evicted, _ = self._entries.popitem(last=False)
                self._file_locks.pop(evicted, None)
                self._bases.pop(evicted, None)
        return parsed

    def _from_base(self, path: str, language: str, base: ParsedFile, tree_source: bytes,
                   region: tuple[int, int, int]) -> ParsedFile:
        """``tree_source`` parsed as one edit of ``base``: bytes start..old_end of it are now
        start..new_end (``region``)."""
        self.from_base += 1
        start, old_end, new_end = region
        return self._incremental(path, language, base, tree_source, start, old_end, new_end, forget_predecessor=True)

    def apply_edit(
        self,
        path: str,
        language: str,
        start_byte: int,
        old_end_byte: int,
        new_text: str,
    ) -> ParsedFile:
        """Apply one explicit replacement (as an IDE change event describes it) to the cached file."""
        with self._lock:
            cached = self._entries.get((path, language))
        if cached is None:
            raise KeyError(f"{path} is not cached")
        src = cached.source
        new_source = src[:start_byte] + new_text.encode("utf-8") + src[old_end_byte:]
        return self.get(path, new_source.decode("utf-8", "replace"), language)

    def invalidate(self, path: str) -> None:
        with self._lock:
            for key in [k for k in self._entries if k[0] == path]:
                del self._entries[key]
            for key in [k for k in self._bases if k[0] == path]:
                del self._bases[key]

    def _parse(self, path: str, source: bytes, language: str, cached: ParsedFile | None) -> ParsedFile:
        if cached is None:
            self.full_parses += 1
            return ParsedFile(path, language, source, parse_source(language, source))
        old = cached.parsed_bytes
        start, old_end, new_end = diff_region(old, source)
        middle = _second_region(old, source, start, old_end, new_end)
        if middle is not None:
            # Two edits far apart (the line typed in before, the line typed in now): one edit
            # spanning both would make tree-sitter re-parse every line between them (25-50 ms
            # on a 3,000-line file, against ~1 ms for each edit alone). Go through the version
            # with only the first edit applied.
            first_old_end, first_new_end = middle
            halfway = source[:first_new_end] + old[first_old_end:]
            cached = self._incremental(path, language, cached, halfway, start, first_old_end, first_new_end,
                                       forget_predecessor=True)
            start, old_end, new_end = diff_region(halfway, source)
            return self._incremental(path, language, cached, source, start, old_end, new_end,
                                     forget_predecessor=False)
        return self._incremental(path, language, cached, source, start, old_end, new_end, forget_predecessor=True)

    def _incremental(self, path: str, language: str, cached: ParsedFile, source: bytes, start: int, old_end: int,
                     new_end: int, *, forget_predecessor: bool) -> ParsedFile:
        """``cached`` re-parsed as ``source``, which differs from it only in bytes start..old_end
        (now start..new_end)."""
        old = cached.parsed_bytes
        # Tree.edit mutates; copy so a caller still holding the previous version keeps a valid tree.
        tree = cached.tree.copy()
        tree.edit(
            start_byte=start,
            old_end_byte=old_end,
            new_end_byte=new_end,
            start_point=_point_at(old, start),
            old_end_point=_point_at(old, old_end),
            new_end_point=_point_at(source, new_end),
        )
        if _only_spacing_changed(old, source, start, old_end, new_end, indentation_matters=language == "python"):
            # A keystroke on the blanked cursor line only widens or narrows a run of spaces there
            # (the typed code is blanked byte for byte): no token or indentation changes, so the
            # edited tree, its nodes shifted, is what a re-parse would return (1-7 ms saved on a
            # 2,000-5,000-line file).
            self.shifted_without_parse += 1
            new_tree = tree
        else:
            self.incremental_parses += 1
            new_tree = parse_source(language, source, old_tree=tree)
        parsed = ParsedFile(path, language, source, new_tree, incremental=True)
        # What changed since which version, for derived data that can be updated rather than
        # rebuilt (indexer.symbols shifts the symbol table past an edit inside one function).
        # The previous version forgets its own predecessor, so versions never chain up in memory
        # (a halfway version, see _parse, keeps its link until the final version is replaced).
        if forget_predecessor:
            cached.derived.pop(EDIT_KEY, None)
            cached.derived.pop(EDITED_TREE_KEY, None)
        parsed.derived[EDIT_KEY] = (cached, start, old_end, new_end)
        parsed.derived[EDITED_TREE_KEY] = tree
        return parsed


def _edit_region(old: bytes, new: bytes, limit: int) -> tuple[int, int, int] | None:
    """The one region where ``new`` differs from ``old``: (start, old end, new end), or None when
    it spans more than ``limit`` bytes."""
    if abs(len(old) - len(new)) > limit:
        return None
    start, old_end, new_end = diff_region(old, new)
    if max(old_end, new_end) - start > limit:
        return None
    return start, old_end, new_end


_SPACING = frozenset(b" \t")


def _only_spacing_changed(old: bytes, new: bytes, start: int, old_end: int, new_end: int,
                          indentation_matters: bool) -> bool:
    """Does ``new`` differ from ``old`` only by spaces added or removed inside a line, after the
    line's first character that is not a space and after a space (so no token is stretched,
    joined or split)?"""
    changed = old[start:old_end] + new[start:new_end]
    if not changed or not _SPACING.issuperset(changed):
        return False
    line_start = old.rfind(b"\n", 0, start) + 1
    if indentation_matters and not old[line_start:start].strip():
        return False  # a line's indentation, or a blank line's spaces
    # After a space, not at a token's end: tree-sitter's edit stretches a node that ends where
    # spaces are inserted, which a re-parse would not (checked against full parses in the tests).
    return old[start - 1:start] in (b" ", b"\t")


# Two differing regions are parsed as two edits when at least this many bytes between them agree.
SEPARATE_EDITS_MIN_GAP = 4096


def _second_region(old: bytes, new: bytes, start: int, old_end: int, new_end: int) -> tuple[int, int] | None:
    """Where the first of two separate differences ends, as (end in old, end in new), when
    old[start:old_end] and new[start:new_end] differ at both ends but agree on a long stretch
    after the first line that differs; None otherwise (one edit will do)."""
    if min(old_end, new_end) - start < SEPARATE_EDITS_MIN_GAP:
        return None
    # The first difference is taken to end with its line in each version (a typed-in line).
    first_old = old.find(b"\n", start, old_end)
    first_new = new.find(b"\n", start, new_end)
    if first_old == -1 or first_new == -1:
        return None
    same = common_prefix_len(old[first_old:old_end], new[first_new:new_end])
    if same < SEPARATE_EDITS_MIN_GAP:
        return None
    return first_old, first_new


# The process-wide cache the context assembler uses.
TREE_CACHE = TreeCache()

