"""A per-file parse-tree cache (``TreeCache``; the workers keep one per file session), updated incrementally.

The completion hot path re-parses the same file on every keystroke, so trees are kept per
file and updated incrementally: the new text is diffed against the cached one (common
prefix/suffix, compared with memcmp-speed slicing), the old tree is told about the edit with
``Tree.edit`` and tree-sitter re-parses only what changed (~1 ms for a one-line edit of a
2,600-line file, against ~10 ms cold).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from tree_sitter import Point

from syntax.blanking import blank_line_bytes, continues_line, line_bounds
from syntax.parsed_file import EDIT_KEY, EDITED_TREE_KEY, ParsedFile, parse_source
from syntax.textdiff import diff_region, diff_region_within, second_region

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
        bounds = line_bounds(source, blank_line) if blank_line is not None else None
        key = (path, language)
        with self._lock:
            file_lock = self._file_locks.setdefault(key, threading.Lock())
            previous = self._entries.get(key)
            base = self._bases.get(key)
        if blank_line is not None and bounds is not None:
            in_brackets = language == "python" and continues_line((previous, base), source, bounds[0])
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
                region = diff_region_within(base.parsed_bytes, tree_source, MAX_BASE_EDIT_BYTES)
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

    def _parse(self, path: str, source: bytes, language: str, cached: ParsedFile | None) -> ParsedFile:
        if cached is None:
            self.full_parses += 1
            return ParsedFile(path, language, source, parse_source(language, source))
        old = cached.parsed_bytes
        start, old_end, new_end = diff_region(old, source)
        middle = second_region(old, source, start, old_end, new_end)
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
        # rebuilt (syntax.symbols.shift moves the symbol table past an edit inside one function).
        # The previous version forgets its own predecessor, so versions never chain up in memory
        # (a halfway version, see _parse, keeps its link until the final version is replaced).
        if forget_predecessor:
            cached.derived.pop(EDIT_KEY, None)
            cached.derived.pop(EDITED_TREE_KEY, None)
        parsed.derived[EDIT_KEY] = (cached, start, old_end, new_end)
        parsed.derived[EDITED_TREE_KEY] = tree
        return parsed


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


def _point_at(source: bytes, offset: int) -> Point:
    row = source.count(b"\n", 0, offset)
    line_start = source.rfind(b"\n", 0, offset) + 1
    return Point(row, offset - line_start)

