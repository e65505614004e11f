"""References: the identifier uses in a range of a file, from its tree (``references_in_range``) or,
on the cursor line the tree does not hold, from the line's text (``line_references``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Query, QueryCursor

from ctxpress_core.languages import LINE_COMMENT
from syntax.grammars import language_of
from syntax.parsed_file import ParsedFile
from syntax.symbols.decl import field_node, node_text


@dataclass(frozen=True)
class Reference:
    name: str
    byte: int
    line: int
    receiver: str | None  # "self" in self.helper(); None for a bare name
    is_member: bool  # attribute/field/method access (resolved against a class's members)


_REF_QUERIES: dict[str, str] = {
    "python": "(identifier) @n",
    "javascript": "(identifier) @n (property_identifier) @m (shorthand_property_identifier) @n",
    "typescript": "(identifier) @n (property_identifier) @m (type_identifier) @n (shorthand_property_identifier) @n",
    "tsx": "(identifier) @n (property_identifier) @m (type_identifier) @n (shorthand_property_identifier) @n",
    "go": "(identifier) @n (field_identifier) @m (type_identifier) @n",
    "java": "(identifier) @n (type_identifier) @n",
    "rust": "(identifier) @n (field_identifier) @m (type_identifier) @n",
    "c": "(identifier) @n (field_identifier) @m (type_identifier) @n",
    "cpp": "(identifier) @n (field_identifier) @m (type_identifier) @n (namespace_identifier) @n",
}
_queries: dict[str, Query] = {}

# (parent node type, field holding the accessed name, field holding the receiver)
_MEMBER_PARENTS: dict[str, tuple[str, str]] = {
    "attribute": ("attribute", "object"),  # python
    "member_expression": ("property", "object"),  # js/ts
    "selector_expression": ("field", "operand"),  # go
    "field_access": ("field", "object"),  # java
    "method_invocation": ("name", "object"),  # java
    "field_expression": ("field", "argument"),  # c/cpp (rust uses "value", handled below)
    "scoped_identifier": ("name", "path"),  # rust Self::new
    "qualified_identifier": ("name", "scope"),  # c++ Store::get
}


def reference_query(language: str) -> Query:
    """The query capturing ``language``'s identifier uses, compiled once (~10 ms cold)."""
    q = _queries.get(language)
    if q is None:
        q = Query(language_of(language), _REF_QUERIES[language])
        _queries[language] = q
    return q


def references_in_range(parsed: ParsedFile, start_byte: int, end_byte: int,
                        names: frozenset[bytes] | set[bytes] | None = None) -> list[Reference]:
    """Identifier uses inside a byte range, from the syntax tree (so strings and comments never
    count); with ``names``, only uses of those (a caller resolving against a symbol table skips
    the locals and builtins that make up most of a body)."""
    if parsed.language not in _REF_QUERIES:
        return []
    cursor = QueryCursor(reference_query(parsed.language))
    cursor.set_byte_range(start_byte, end_byte)
    captures = cursor.captures(parsed.tree.root_node)
    src = parsed.source
    out: list[Reference] = []
    for capture_name, nodes in captures.items():
        for node in nodes:
            if node.start_byte < start_byte or node.end_byte > end_byte:
                continue
            raw = src[node.start_byte : node.end_byte]
            if names is not None and raw not in names:
                continue
            name = raw.decode("utf-8", "replace")
            receiver: str | None = None
            is_member = capture_name == "m"
            parent = node.parent
            if parent is not None:
                spec = _MEMBER_PARENTS.get(parent.type)
                if spec is not None:
                    name_field, recv_field = spec
                    if parent.type == "field_expression" and parsed.language == "rust":
                        recv_field = "value"
                    named = field_node(parent, name_field)
                    if named is not None and named.id == node.id:
                        recv = field_node(parent, recv_field)
                        # Java's helper() without a receiver is a bare name (implicit this).
                        receiver = node_text(src, recv) if recv is not None else None
                        is_member = recv is not None
                    elif parent.type in ("attribute", "member_expression", "selector_expression",
                                         "field_access", "field_expression"):
                        pass  # the receiver itself: a plain name
                elif is_member:
                    continue  # a property name in a declaration/object literal, not a use
            out.append(Reference(name, node.start_byte, node.start_point.row, receiver, is_member))
    out.sort(key=lambda r: r.byte)
    return out


_LINE_STRING = re.compile(r"""(["'`])(?:\\.|(?!\1).)*\1?""")
_LINE_NAME = re.compile(r"[A-Za-z_]\w*")


def line_references(parsed: ParsedFile, line: int) -> list[Reference]:
    """Identifier uses on a line the tree does not hold (the blanked cursor line, see
    TreeCache.get), read from its text: strings are skipped, ``a.b``/``a->b``/``a::b`` give
    ``b`` with receiver ``a``. Half-typed code has no reliable tree there anyway."""
    start = parsed.line_byte(line)
    code = parsed.text(start, parsed.line_end_byte(line))
    comment = LINE_COMMENT.get(parsed.language)
    code = _LINE_STRING.sub(lambda m: " " * len(m.group(0)), code)
    if comment and comment in code:
        code = code[: code.index(comment)]
    out: list[Reference] = []
    byte, seen = start, 0  # byte offsets grow with the line: one pass, not a re-encoding per name
    for m in _LINE_NAME.finditer(code):
        receiver = _receiver_before(code, m.start())
        byte += len(code[seen:m.start()].encode("utf-8"))
        seen = m.start()
        out.append(Reference(m.group(0), byte, line, receiver, receiver is not None))
    return out


_ASCII_NAME_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")


def _receiver_before(code: str, at: int) -> str | None:
    """What ``a.b``, ``a->b`` or ``a::b`` accesses ``b`` on, for the name starting at ``at``: the
    name (or the one non-space character) before the operator; None when there is no operator.
    Read backwards from ``at``, so a line of many names costs one pass (a regex anchored at each
    name rescanned the line from its start: quadratic, with the GIL held, on a minified line)."""
    i = at
    while i > 0 and code[i - 1].isspace():
        i -= 1
    if code[max(0, i - 2):i] in ("->", "::"):
        i -= 2
    elif i > 0 and code[i - 1] == ".":
        i -= 1
    else:
        return None
    while i > 0 and code[i - 1].isspace():
        i -= 1
    end = i
    while i > 0 and (code[i - 1].isalnum() or code[i - 1] == "_"):
        i -= 1
    word = code[i:end]
    first = next((j for j, c in enumerate(word) if c in _ASCII_NAME_START), None)
    if first is not None:
        return word[first:]
    return code[end - 1] if end > 0 and not code[end - 1].isspace() else None
