"""The extractor: walks a tree's declaration levels and asks each language's classifier what a node is.

Only declarations at module level and inside class-like bodies are extracted: those are the
units the context assembler crops by, and walking just those levels keeps extraction cheap
(a few ms for a 5,000-line file) instead of visiting every node.
"""

from __future__ import annotations

from tree_sitter import Node

from syntax.parsed_file import ParsedFile
from syntax.symbols.decl import Classifier, Decl, field_node, node_text
from syntax.symbols.docs import doc_line, py_docstring
from syntax.symbols.lang.c import classify_c
from syntax.symbols.lang.go import classify_go
from syntax.symbols.lang.java import classify_java
from syntax.symbols.lang.javascript import classify_javascript
from syntax.symbols.lang.python import classify_python
from syntax.symbols.lang.rust import classify_rust
from syntax.symbols.model import CLASS_KINDS, Symbol

# The classifier of each language with symbols; a language not here has none.
CLASSIFIERS: dict[str, Classifier] = {
    "python": classify_python,
    "javascript": classify_javascript,
    "typescript": classify_javascript,
    "tsx": classify_javascript,
    "go": classify_go,
    "java": classify_java,
    "rust": classify_rust,
    "c": classify_c,
    "cpp": classify_c,
}

_COMMENT_TYPES = frozenset({"comment", "line_comment", "block_comment"})
LEADING_TYPES = _COMMENT_TYPES | {"attribute_item"}  # Rust #[...] belongs to the next item


class Extractor:
    """One extraction of a parsed file's symbols, in document order (``run``); shifting and
    splicing also visit chosen levels with it, over a table they already hold (``symbols``)."""

    def __init__(self, parsed: ParsedFile) -> None:
        self.parsed = parsed
        self.src = parsed.source
        self.lang = parsed.language
        self.symbols: list[Symbol] = []

    # -- traversal -----------------------------------------------------------------------------

    def run(self) -> list[Symbol]:
        self.visit(self.parsed.tree.root_node.children, parent=None, owner=None)
        return self.symbols

    def visit(self, nodes: list[Node], parent: int | None, owner: str | None) -> None:
        leading: list[Node] = []
        for node in nodes:
            if not node.is_named:
                continue
            t = node.type
            if t in LEADING_TYPES:
                if leading and leading[-1].end_point.row + 1 < node.start_point.row:
                    leading = []  # a blank line separates it from the earlier comment
                leading.append(node)
                continue
            transparent = self._transparent_children(node)
            if transparent is not None:
                self.visit(transparent, parent, owner)
                leading = []
                continue
            decls = self.classify(node, parent, owner)
            if leading and leading[-1].end_point.row + 1 < node.start_point.row:
                leading = []
            for decl, outer in decls:
                self._add(decl, outer, leading if outer is decls[0][1] else [], parent)
            leading = []

    def _add(self, decl: Decl, outer: Node, leading: list[Node], parent: int | None) -> None:
        src = self.src
        start = leading[0] if leading else outer
        doc = None
        if self.lang == "python":
            doc = py_docstring(decl.body, src)
        if doc is None:
            comments = [n for n in leading if n.type in _COMMENT_TYPES]
            if comments:
                doc = doc_line(node_text(src, comments[0]) if len(comments) == 1 else
                               "\n".join(node_text(src, c) for c in comments))
        body = decl.body
        sym = Symbol(
            kind=decl.kind,
            name=decl.name,
            start_line=start.start_point.row,
            end_line=_last_line(outer),
            start_byte=start.start_byte,
            end_byte=outer.end_byte,
            decl_start_byte=outer.start_byte,
            body_start_byte=body.start_byte if body is not None else None,
            body_end_byte=body.end_byte if body is not None else None,
            owner=decl.owner,
            parent=parent,
            doc=doc,
            is_container=decl.container_body is not None,
            node_type=outer.type,
            index=len(self.symbols),
        )
        # Rust attributes belong in the signature; other leading nodes are comments.
        if self.lang == "rust":
            attrs = [n for n in leading if n.type == "attribute_item"]
            if attrs:
                sym.decl_start_byte = attrs[0].start_byte
        self.symbols.append(sym)
        if decl.container_body is not None:
            self.visit(decl.container_body.children, sym.index, decl.owner_of_members())

    def _transparent_children(self, node: Node) -> list[Node] | None:
        """Wrappers whose children are declarations of the same level (include guards, if-blocks)."""
        t = node.type
        lang = self.lang
        if lang == "python" and t in ("if_statement", "try_statement"):
            out: list[Node] = []
            for c in node.named_children:
                if c.type == "block":
                    out.extend(c.children)
                elif c.type in ("elif_clause", "else_clause", "except_clause", "finally_clause"):
                    for b in c.named_children:
                        if b.type == "block":
                            out.extend(b.children)
            return out
        if lang in ("c", "cpp") and t in ("preproc_ifdef", "preproc_if", "preproc_else", "preproc_elif"):
            return [c for i, c in enumerate(node.children) if node.field_name_for_child(i) not in ("name", "condition")]
        if lang == "java" and t == "enum_body_declarations":
            return node.children  # an enum's fields and methods
        if lang in ("c", "cpp") and t == "linkage_specification":
            body = field_node(node, "body")
            return body.children if body is not None and body.type == "declaration_list" else None
        return None

    # -- classification ------------------------------------------------------------------------

    def classify(self, node: Node, parent: int | None, owner: str | None) -> list[tuple[Decl, Node]]:
        """What ``node`` declares, by its language's classifier: (declaration, the node its lines
        come from) each; none for a node that declares nothing."""
        classifier = CLASSIFIERS.get(self.lang)
        if classifier is None:
            return []
        decl = classifier(self, node, parent, owner)
        if decl is None:
            return []
        if isinstance(decl, list):
            return decl
        return [(decl, node)]

    def in_class(self, parent: int | None) -> bool:
        """Is the symbol at index ``parent`` class-like (so a declaration in it is a member)?"""
        return parent is not None and self.symbols[parent].kind in CLASS_KINDS


def _last_line(node: Node) -> int:
    """Last line a node occupies; a node ending at column 0 (trailing newline) ends on the line before."""
    end = node.end_point
    return end.row - 1 if end.column == 0 and end.row > node.start_point.row else end.row
