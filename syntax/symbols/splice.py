"""Splicing: the previous version's symbol table with only the declarations an edit touched extracted again.

For edits that may change the table (a declaration's name, a new module-level statement), where a
shift (``syntax.symbols.shift``) cannot be used.
"""

from __future__ import annotations

from tree_sitter import Node

from syntax.parsed_file import EDITED_TREE_KEY, ParsedFile
from syntax.symbols.extract import LEADING_TYPES, Extractor
from syntax.symbols.model import FileSymbols, Symbol
from syntax.symbols.shift import edit_line_delta, first_statement, moved_symbol, span_node


def spliced_symbols(parsed: ParsedFile, previous: ParsedFile, start: int, old_end: int,
                     new_end: int) -> list[Symbol] | None:
    """The previous version's table with only the declarations around the edit extracted again,
    or None when that cannot be done soundly.

    Where tree-sitter says the syntax changed (Tree.changed_ranges, plus the edit itself and both
    versions' blanked cursor lines) is a byte range; the smallest class-like body that holds it
    whole, or else the module, is the level re-extracted: its declarations from the one before
    the range to the one after it (with the comments that may lead them). Everything else keeps
    its symbols, moved past the edit. Extraction visits only those levels and reads each
    declaration from its own node, so the result is what a full extraction gives — at the cost
    of a few declarations instead of ~15 us for every one in the file (a 3,000-line file's
    class-level edit: ~1 ms instead of ~6).
    """
    table = previous.derived.get("symbols")
    edited = parsed.derived.get(EDITED_TREE_KEY)
    if not isinstance(table, FileSymbols) or table.provisional or edited is None:
        return None
    delta = new_end - old_end
    lo, hi = start, new_end
    for changed in edited.changed_ranges(parsed.tree):  # type: ignore[attr-defined]
        lo, hi = min(lo, changed.start_byte), max(hi, changed.end_byte)
    # The symbols read names and docs from the real text, whose blanked line the tree does not see.
    for version in (parsed, previous):
        if version.blanked_line is not None:
            a, b = version.line_byte(version.blanked_line), version.line_end_byte(version.blanked_line)
            if version is previous:
                a = a if a <= start else (a + delta if a >= old_end else start)
                b = b if b <= start else (b + delta if b >= old_end else new_end)
            lo, hi = min(lo, a), max(hi, b)
    old_lo, old_hi = lo, hi - delta  # lo <= start and hi >= new_end
    symbols = table.symbols
    containers = sorted((s for s in symbols if s.is_container and s.body_start_byte is not None
                         and s.body_end_byte is not None and s.body_start_byte < old_lo
                         and old_hi < s.body_end_byte), key=lambda s: s.end_byte - s.start_byte)
    line_delta = edit_line_delta(previous, parsed, start, old_end, new_end)
    for level in [*containers, None]:
        spliced = _splice_level(parsed, previous, table, level, lo, hi, start, old_end, new_end, line_delta)
        if spliced is not None:
            return spliced
    return None


def _level_members(version: ParsedFile, symbols: list[Symbol], level: Symbol | None,
                   end: int) -> tuple[list[Node], str | None, Extractor] | None:
    """The nodes a full extraction visits at ``level`` (a container ending at ``end`` in
    ``version``, or the module), the owner it gives them, and an extractor over ``symbols``."""
    extractor = Extractor(version)
    extractor.symbols = symbols
    if level is None:
        return version.tree.root_node.children, None, extractor
    node = span_node(version, level, end)
    if node is None:
        return None
    for decl, outer in extractor.classify(node, level.parent, level.owner):
        if outer.start_byte == node.start_byte and decl.container_body is not None:
            if decl.name != level.name:
                return None
            return decl.container_body.children, decl.owner_of_members(), extractor
    return None


def _ends_run(node: Node) -> bool:
    """Does ``node`` end a run of leading comments (a named node that is not one)?"""
    return node.is_named and node.type not in LEADING_TYPES


def _splice_level(parsed: ParsedFile, previous: ParsedFile, table: FileSymbols, level: Symbol | None, lo: int,
                  hi: int, start: int, old_end: int, new_end: int, line_delta: int) -> list[Symbol] | None:
    """The table spliced at ``level`` (a container, or None: the module), or None."""
    delta = new_end - old_end
    symbols = table.symbols
    prefix_end = level.index + 1 if level is not None else 0
    # symbols up to the level's own (its ancestors and itself grow by the edit), for classify
    head = [moved_symbol(s, start, old_end, new_end, line_delta, s.doc) for s in symbols[:prefix_end]]
    new_level = head[-1] if level is not None else None
    found_new = _level_members(parsed, head, new_level, new_level.end_byte if new_level else 0)
    found_old = _level_members(previous, symbols, level, level.end_byte if level else 0)
    if found_new is None or found_old is None:
        return None
    nodes, owner, extractor = found_new
    old_nodes = found_old[0]
    if level is not None and parsed.language == "python":
        body = first_statement(parsed, new_level)[1]  # type: ignore[arg-type]
        old_body = first_statement(previous, level)[1]
        if body is None or old_body is None or body.end_byte >= lo or old_body.end_byte >= lo:
            return None  # the edit may change the class's docstring
    # The level's children touching lo..hi, one more each side, and the comments before them
    # (leading comments are part of the next declaration; unnamed nodes do not break the run).
    count = len(nodes)
    first = next((j for j, c in enumerate(nodes) if c.end_byte >= lo), count)
    last = first - 1
    while last + 1 < count and nodes[last + 1].start_byte <= hi:
        last += 1
    first, last = max(first - 1, 0), min(last + 1, count - 1)
    while first > 0 and (not nodes[first - 1].is_named or nodes[first - 1].type in LEADING_TYPES):
        first -= 1
    # The range ends with a declaration in both versions, so the first child after it is led by
    # no comment of the range (in either version: a comment typed over is no longer leading).
    while True:
        after = count - 1 - last  # children after the range, the same in both versions but moved
        old_last = len(old_nodes) - 1 - after
        if old_last < first - 1:
            return None
        if after == 0 or (_ends_run(nodes[last]) and _ends_run(old_nodes[old_last])):
            break
        last += 1
    if first > 0:
        a, b = nodes[first - 1], old_nodes[first - 1]
        if (a.start_byte, a.end_byte, a.type) != (b.start_byte, b.end_byte, b.type) or a.end_byte > start:
            return None
    if after:
        a, b = nodes[last + 1], old_nodes[old_last + 1]
        if (a.start_byte, a.end_byte, a.type) != (b.start_byte + delta, b.end_byte + delta, b.type) \
                or a.start_byte < new_end:
            return None
    # The old symbols of the range: every symbol declared between the neighbours kept.
    range_start = old_nodes[first - 1].end_byte if first > 0 else (level.body_start_byte or 0) if level else 0
    range_end = old_nodes[old_last + 1].start_byte if after else (level.end_byte if level else 1 << 62)
    k0 = prefix_end
    while k0 < len(symbols) and symbols[k0].decl_start_byte < range_start:
        k0 += 1
    k1 = k0
    while k1 < len(symbols) and symbols[k1].decl_start_byte < range_end:
        k1 += 1
    if any(range_start <= s.decl_start_byte < range_end for s in (*symbols[prefix_end:k0], *symbols[k1:])):
        return None  # not one run in document order: leave it to a full extraction
    head.extend(moved_symbol(s, start, old_end, new_end, line_delta, s.doc) for s in symbols[prefix_end:k0])
    extractor.visit(nodes[first : last + 1], level.index if level is not None else None, owner)
    out = extractor.symbols
    shift = len(out) - k1
    out.extend(moved_symbol(s, start, old_end, new_end, line_delta, s.doc, shift, k1) for s in symbols[k1:])
    return out
