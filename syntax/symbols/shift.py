"""The previous version's symbol table moved past an edit that cannot change it.

The extractor never looks into function bodies, so an edit inside one (or inside its parameter
list, or below its docstring's doc line) cannot add or remove a symbol: the table is shifted
instead of rebuilt (a tenth of the cost). So are blanks and the ``_`` placeholder on an empty line
between definitions. A tree broken by half-typed code inside a function keeps the last sound
table, shifted and marked provisional, until the tree is whole again.

Lines are 0-based and inclusive.
"""

from __future__ import annotations

from tree_sitter import Node

from syntax.parsed_file import ParsedFile
from syntax.symbols.docs import doc_line, py_docstring
from syntax.symbols.extract import Extractor
from syntax.symbols.model import FUNCTION_KINDS, FileSymbols, Symbol


def shifted_symbols(parsed: ParsedFile, previous: ParsedFile, start: int, old_end: int,
                     new_end: int) -> tuple[list[Symbol], int | None] | None:
    """The previous version's symbols moved past an edit of bytes start..old_end (now ..new_end),
    and, when they are provisional (see below), the index of the function whose half-typed code
    broke the tree; None when the edit may change the table (outside a function body or its
    parameters, in a docstring, or a sound tree's structure changed)."""
    table = previous.derived.get("symbols")
    if not isinstance(table, FileSymbols):
        return None
    if start == old_end == new_end and parsed.tree is previous.tree:
        return list(table.symbols), table.broken_in  # only the blanked cursor line's text changed
    if previous.tree.root_node.has_error and not table.provisional:
        # A table read from a broken tree: mending the tree may move declarations anywhere
        # (a class that error recovery cut short grows back), which only a splice sees.
        return None
    inside = [s for s in table.symbols if not s.is_container and s.body_start_byte is not None
              and s.body_end_byte is not None and s.body_start_byte < start and old_end <= s.body_end_byte]
    in_signature = False
    if not inside:
        # A function's parameter list does not show in the table either (summaries read it from
        # the source): typing a parameter on its own line only moves what follows.
        inside = [s for s in table.symbols if s.kind in FUNCTION_KINDS and s.body_start_byte is not None
                  and s.decl_start_byte < start and old_end < s.body_start_byte
                  and _in_parameters(previous, s, start, old_end)]
        in_signature = bool(inside)
    if not inside:
        return _shifted_past_inert_edit(parsed, previous, table, start, old_end, new_end)
    fn = min(inside, key=lambda s: s.end_byte - s.start_byte)
    if table.provisional and fn.index != table.broken_in:
        # Kept for the function being typed in, not for edits elsewhere (the spot left, as a
        # jump away restores it, and a new one) which may change declarations unseen.
        return None
    delta = new_end - old_end
    root = parsed.tree.root_node
    # The function must still be one node of the same type spanning the shifted range (up to
    # trailing blanks: a blanked last line, see TreeCache.get, ends in spaces the node leaves out)...
    end = fn.end_byte + delta
    tree_bytes = parsed.parsed_bytes
    while end > fn.decl_start_byte and tree_bytes[end - 1] in b" \t":
        end -= 1
    node = span_node(parsed, fn, end)
    intact = node is not None and (not root.has_error or _same_body_start(parsed, table, fn, node, start))
    # ...with no parse error outside it. A tree broken by the edit is not a new structure to
    # believe: half-typed code inside a function (a header with its block below, an open string)
    # leaves the declarations what they were, and the table stays the last sound one, shifted,
    # until the tree is whole again and says otherwise.
    sound = intact and not (root.has_error and _has_error_outside(parsed, fn.decl_start_byte, end))
    keep_last_sound = root.has_error and not in_signature and (
        table.provisional or not previous.tree.root_node.has_error)
    if not sound and not keep_last_sound:
        return None
    provisional = not sound
    # ...and (Python) the edit after the docstring's doc line, which is part of the symbol; an
    # edit of that line (a docstring being written) changes the function's doc and nothing else.
    new_doc: str | None = None
    if parsed.language == "python" and not in_signature:
        body, first = first_statement(previous, fn)
        if first is None:
            return None
        if (py_docstring(body, previous.source) is not None and start <= first.end_byte
                and not _after_doc_line(previous.source, first, start, old_end)):
            new_doc = _new_py_doc(parsed, fn.body_start_byte) if sound else None
            if new_doc is None:
                return None
    moved = _moved(table, previous, parsed, start, old_end, new_end, fn, new_doc)
    if end != fn.end_byte + delta:
        # The function (and what ends with it) ends before the blanks that end the edited line,
        # as a fresh tree has it.
        for old, new in zip(table.symbols, moved, strict=True):
            if new is not old and old.end_byte == fn.end_byte:
                new.end_byte = end
                if old.body_end_byte == fn.end_byte:
                    new.body_end_byte = end
    return moved, fn.index if provisional else None


# What the cursor line's blanking leaves (see syntax.blanking): spaces and the
# one-character statement "_", which is never a declaration.
_INERT = frozenset(b" \t_")
_SPACES = frozenset(b" \t")
_NEWLINE = frozenset(b"\r\n")


def _shifted_past_inert_edit(parsed: ParsedFile, previous: ParsedFile, table: FileSymbols, start: int,
                             old_end: int, new_end: int) -> tuple[list[Symbol], int | None] | None:
    """Outside function bodies: an edit that only puts or takes away blanks and the "_"
    placeholder (the blanked cursor line on an empty line between two methods or two top-level
    definitions), when the container around it keeps its shape and no error appears elsewhere."""
    changed = previous.parsed_bytes[start:old_end] + parsed.parsed_bytes[start:new_end]
    if not (_INERT if parsed.language == "python" else _SPACES).issuperset(changed):
        return None  # (elsewhere "_" is a name someone may be typing; blanks there are spaces)
    if table.provisional:
        return None  # kept for the function being typed in, not for edits elsewhere
    for version, end in ((previous, old_end), (parsed, new_end)):
        # ...on lines holding nothing else: spaces before code are its indentation (Python)
        first, last = version.line_byte(version.line_of(start)), version.line_end_byte(version.line_of(end))
        if not (_INERT | _NEWLINE).issuperset(version.parsed_bytes[first:last]):
            return None
    if any(s.start_byte < old_end and start < s.header_end_byte for s in table.symbols):
        return None  # touches a declaration's own lines (its name, decorators, doc comment)
    holders = [s for s in table.symbols if s.is_container and s.body_start_byte is not None
               and s.body_end_byte is not None and s.body_start_byte < start and old_end <= s.body_end_byte]
    holder = min(holders, key=lambda s: s.end_byte - s.start_byte) if holders else None
    root = parsed.tree.root_node
    if holder is not None:
        end = holder.end_byte + new_end - old_end
        if not _spans(parsed, holder, end):
            return None  # e.g. a placeholder at column 0 inside a class: the class ends there
        if root.has_error and _has_error_outside(parsed, holder.decl_start_byte, end):
            return None
        if parsed.language == "python":  # not before the class's docstring (its doc)
            first = first_statement(previous, holder)[1]
            if first is None or start <= first.end_byte:
                return None
    elif root.has_error and not previous.tree.root_node.has_error:
        return None
    if parsed.language == "python":
        # Each placeholder on the edited line, before and after, must be a statement of the
        # container's own body (or of the module): one indented under a definition above it
        # would have become that definition's body.
        body_start = holder.body_start_byte if holder is not None else None
        for version, first_byte, last_byte in ((previous, start, old_end), (parsed, start, new_end)):
            if not _placeholders_belong_to(version, first_byte, last_byte, body_start):
                return None
    return _moved(table, previous, parsed, start, old_end, new_end, None, None), None


def span_node(parsed: ParsedFile, sym: Symbol, end: int) -> Node | None:
    """``sym``'s node in ``parsed``'s tree when it is still one node of its type from its
    declaration's start to ``end``, else None."""
    node = parsed.tree.root_node.descendant_for_byte_range(sym.decl_start_byte, end)
    if node is not None and node.type == sym.node_type and node.start_byte == sym.decl_start_byte \
            and node.end_byte == end:
        return node
    return None


def _spans(parsed: ParsedFile, sym: Symbol, end: int) -> bool:
    """Is ``sym`` still one node of its type from its declaration's start to ``end`` in the new tree?"""
    return span_node(parsed, sym, end) is not None


def _same_body_start(parsed: ParsedFile, table: FileSymbols, fn: Symbol, node: Node, start: int) -> bool:
    """Does ``fn``'s body (``node`` is fn's node in the new tree) still start where it did (edited
    at ``start``)? In a broken tree error recovery can take a half-typed first statement out of
    the body (a header ``if`` with nothing after it), which the extractor would see."""
    if fn.body_start_byte is None or fn.body_start_byte >= start:
        return True  # (an edit before the body moves it: checked by the shift itself)
    extractor = Extractor(parsed)
    extractor.symbols = table.symbols  # (for the parent's kind only)
    decls = extractor.classify(node, fn.parent, fn.owner)
    return any(d.body is not None and d.body.start_byte == fn.body_start_byte and d.name == fn.name for d, _ in decls)


def first_statement(version: ParsedFile, sym: Symbol) -> tuple[Node | None, Node | None]:
    """``sym``'s body node in ``version``'s tree and the body's first statement."""
    body = version.tree.root_node.descendant_for_byte_range(sym.body_start_byte, sym.body_end_byte)
    # The smallest node over the body's bytes is its only statement (or its string) when it has
    # just one: up to the block itself.
    while body is not None and body.type != "block" and body.parent is not None \
            and body.parent.start_byte == sym.body_start_byte:
        body = body.parent
    if body is None or body.type != "block":
        return None, None
    return body, (body.named_child(0) if body.named_child_count else None)


def _placeholders_belong_to(version: ParsedFile, start: int, end: int, body_start: int | None) -> bool:
    """Is every "_" on the lines of start..end a statement directly in the block starting at
    ``body_start`` (None: the module)?"""
    src = version.parsed_bytes
    first, last = version.line_byte(version.line_of(start)), version.line_end_byte(version.line_of(end))
    pos = src.find(b"_", first, last)
    while pos != -1:
        node = version.tree.root_node.descendant_for_byte_range(pos, pos + 1)
        stmt = node.parent if node is not None else None
        block = stmt.parent if stmt is not None else None
        if stmt is None or stmt.type != "expression_statement" or block is None:
            return False
        if body_start is None and block.type != "module":
            return False
        if body_start is not None and block.start_byte != body_start:
            return False
        pos = src.find(b"_", pos + 1, last)
    return True


def _moved(table: FileSymbols, previous: ParsedFile, parsed: ParsedFile, start: int, old_end: int,
           new_end: int, fn: Symbol | None, new_doc: str | None) -> list[Symbol]:
    """The table's symbols moved past an edit of bytes start..old_end (now ..new_end)."""
    line_delta = edit_line_delta(previous, parsed, start, old_end, new_end)
    return [moved_symbol(s, start, old_end, new_end, line_delta, new_doc if s is fn and new_doc is not None else s.doc)
            for s in table.symbols]


def edit_line_delta(previous: ParsedFile, parsed: ParsedFile, start: int, old_end: int, new_end: int) -> int:
    """How many lines the edit of bytes start..old_end (now ..new_end) added (negative: removed)."""
    return parsed.source.count(b"\n", start, new_end) - previous.source.count(b"\n", start, old_end)


def moved_symbol(s: Symbol, start: int, old_end: int, new_end: int, line_delta: int, doc: str | None,
                 index_delta: int = 0, parents_from: int | None = None) -> Symbol:
    """One symbol moved past an edit of bytes start..old_end (now ..new_end); its index (and its
    parent's, when that is at ``parents_from`` or later) moved by ``index_delta``."""
    delta = new_end - old_end
    index = s.index + index_delta
    parent = s.parent
    if index_delta and parent is not None and parents_from is not None and parent >= parents_from:
        parent += index_delta
    # Symbols are built directly, not with dataclasses.replace: a 3,000-line file has ~100 of
    # them, shifted at every keystroke, and replace() costs ten times a plain construction.
    if s.start_byte < start and old_end <= s.end_byte:
        # contains the edit: the function and the classes around it grow or shrink (a
        # function's body moves too when the edit is in its parameters)
        body_start = s.body_start_byte
        if body_start is not None and body_start >= old_end:
            body_start += delta
        return Symbol(s.kind, s.name, s.start_line, s.end_line + line_delta, s.start_byte, s.end_byte + delta,
                      s.decl_start_byte, body_start, None if s.body_end_byte is None else s.body_end_byte + delta,
                      s.owner, parent, doc, s.is_container, s.node_type, index)
    if s.start_byte >= old_end:
        return Symbol(s.kind, s.name, s.start_line + line_delta, s.end_line + line_delta, s.start_byte + delta,
                      s.end_byte + delta, s.decl_start_byte + delta,
                      None if s.body_start_byte is None else s.body_start_byte + delta,
                      None if s.body_end_byte is None else s.body_end_byte + delta,
                      s.owner, parent, doc, s.is_container, s.node_type, index)
    if index_delta or doc is not s.doc:
        return Symbol(s.kind, s.name, s.start_line, s.end_line, s.start_byte, s.end_byte, s.decl_start_byte,
                      s.body_start_byte, s.body_end_byte, s.owner, parent, doc, s.is_container, s.node_type, index)
    return s  # entirely before the edit


def _new_py_doc(parsed: ParsedFile, body_start: int) -> str | None:
    """The doc line of the Python block starting at ``body_start`` in the new tree."""
    node = parsed.tree.root_node.descendant_for_byte_range(body_start, body_start)
    while node is not None and not (node.type == "block" and node.start_byte == body_start):
        node = node.parent
    return py_docstring(node, parsed.source) if node is not None else None


_PARAMETER_LISTS = frozenset({"parameters", "formal_parameters", "parameter_list", "lambda_parameters"})


def _in_parameters(previous: ParsedFile, fn: Symbol, start: int, old_end: int) -> bool:
    """Is the edit strictly inside ``fn``'s parameter list (in the previous version's tree)?"""
    node = previous.tree.root_node.descendant_for_byte_range(start, old_end)
    while node is not None and node.start_byte >= fn.decl_start_byte:
        if node.type in _PARAMETER_LISTS:
            return node.start_byte < start and old_end < node.end_byte
        node = node.parent
    return False


def _after_doc_line(src: bytes, docstring: Node, start: int, old_end: int) -> bool:
    """Is an edit of bytes start..old_end inside the docstring, after the line the symbol's doc
    comes from and before its closing quotes (so the doc stays what it was)?"""
    line_start = docstring.start_byte
    while line_start < docstring.end_byte:
        line_end = src.find(b"\n", line_start, docstring.end_byte)
        if line_end == -1:
            return False  # the doc line is the last one: the edit touches it or the quotes
        if doc_line(src[line_start:line_end].decode("utf-8", "replace")):
            return line_end < start and old_end < docstring.end_byte - 3
        line_start = line_end + 1
    return False


def _has_error_outside(parsed: ParsedFile, start: int, end: int) -> bool:
    """Any parse error outside the node spanning start..end? Walks down the path to that node,
    checking the siblings' has_error flags (a few hundred nodes, not the whole tree)."""
    node = parsed.tree.root_node
    while True:
        inner = None
        for child in node.children:
            if child.end_byte <= start or child.start_byte >= end:
                if child.has_error:
                    return True
            elif child.start_byte <= start and end <= child.end_byte:
                inner = child
            else:
                return True  # straddles the function's bounds: the structure has changed
        if inner is None or (inner.start_byte == start and inner.end_byte == end):
            return False
        node = inner
