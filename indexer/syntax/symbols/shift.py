"""Blocks of a source file (functions, methods, classes, constants, imports, ...) and references.

Only declarations at module level and inside class-like bodies are extracted: those are the
units the context assembler crops by, and walking just those levels keeps extraction cheap
(a few ms for a 5,000-line file) instead of visiting every node. The table is memoized per
parsed file version (``ParsedFile.derived``).

Lines are 0-based and inclusive everywhere in this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tree_sitter import Node, Query, QueryCursor

from indexer.parsing import EDIT_KEY, EDITED_TREE_KEY, LINE_COMMENT, ParsedFile

FUNCTION_KINDS: frozenset[str] = frozenset({"function", "method", "constructor"})
CLASS_KINDS: frozenset[str] = frozenset(
    {"class", "struct", "interface", "trait", "impl", "enum", "record", "union"}
)
# Containers whose members are module-level in spirit (namespaces, Rust modules).
TRANSPARENT_KINDS: frozenset[str] = frozenset({"namespace"})
DECLARATION_KINDS: frozenset[str] = frozenset({"import", "package"})


@dataclass
class Symbol:
    kind: str  # function, method, constructor, class, struct, interface, trait, impl, enum, record,
    #            union, namespace, type, constant, variable, field, import, package, macro
    name: str
    start_line: int  # includes decorators, attributes and the leading doc comment
    end_line: int
    start_byte: int
    end_byte: int
    decl_start_byte: int  # the declaration itself (decorators included, doc comment excluded)
    body_start_byte: int | None  # None: the declaration has no body (field, prototype, constant)
    body_end_byte: int | None
    owner: str | None = None  # class/type the member belongs to (Go receiver, Rust impl type, C++ scope)
    parent: int | None = None  # index of the syntactic container in FileSymbols.symbols
    doc: str | None = None  # first line of the docstring or doc comment
    is_container: bool = False  # has member symbols of its own (class bodies, impls, namespaces)
    node_type: str = ""
    index: int = -1

    @property
    def qualname(self) -> str:
        return f"{self.owner}.{self.name}" if self.owner else self.name

    @property
    def header_end_byte(self) -> int:
        return self.body_start_byte if self.body_start_byte is not None else self.end_byte

    def contains_line(self, line: int) -> bool:
        return self.start_line <= line <= self.end_line


@dataclass
class FileSymbols:
    parsed: ParsedFile
    symbols: list[Symbol] = field(default_factory=list)
    shifted: bool = False  # moved past an edit from the previous version's table, not rebuilt
    # Shifted through an edit that left the tree broken: the last sound table, kept (see
    # _shifted_symbols) until the tree is whole again.
    provisional: bool = False
    broken_in: int | None = None  # provisional: the function whose half-typed code broke the tree
    # Lookups other modules build from the names, kinds and owners (by symbol index); a shifted
    # table has the same ones, so they are carried over instead of built again at every keystroke.
    lookups: dict[str, object] = field(default_factory=dict, compare=False, repr=False)

    @property
    def language(self) -> str:
        return self.parsed.language

    def children(self, sym: Symbol) -> list[Symbol]:
        return [s for s in self.symbols if s.parent == sym.index]

    def containing(self, line: int) -> list[Symbol]:
        """Symbols whose range contains ``line``, outermost first."""
        return [s for s in self.symbols if s.start_line <= line <= s.end_line]

    def enclosing_function(self, line: int) -> Symbol | None:
        """The innermost extracted function/method containing ``line`` (bodies are not descended,
        so a nested closure resolves to the named function or method that holds it)."""
        found = None
        for s in self.containing(line):
            if s.kind in FUNCTION_KINDS and s.body_start_byte is not None:
                found = s
        return found

    def enclosing_class(self, line: int) -> Symbol | None:
        found = None
        for s in self.containing(line):
            if s.kind in CLASS_KINDS:
                found = s
        return found

    def top_level(self) -> list[Symbol]:
        out = []
        for s in self.symbols:
            p = s.parent
            while p is not None and self.symbols[p].kind in TRANSPARENT_KINDS:
                p = self.symbols[p].parent
            if p is None:
                out.append(s)
        return out


# ---------------------------------------------------------------------------------------------
# Extraction


_COMMENT_TYPES = frozenset({"comment", "line_comment", "block_comment"})
_LEADING_TYPES = _COMMENT_TYPES | {"attribute_item"}  # Rust #[...] belongs to the next item


def _text(src: bytes, node: Node | None) -> str:
    if node is None:
        return ""
    return src[node.start_byte : node.end_byte].decode("utf-8", "replace")


def _field(node: Node, name: str) -> Node | None:
    return node.child_by_field_name(name)


@dataclass
class _Decl:
    """What a language classifier says about one declaration node."""

    kind: str
    name: str
    body: Node | None = None
    owner: str | None = None
    container_body: Node | None = None  # members to extract below this declaration
    member_owner: str | None = None  # owner of the members; defaults to the class name
    doc_node: Node | None = None

    def owner_of_members(self) -> str | None:
        return self.member_owner or (self.name if self.kind in CLASS_KINDS else self.owner)


def _py_docstring(body: Node | None, src: bytes) -> str | None:
    # not named_children: that builds every node; an empty body (being typed) has no child at all
    first = body.named_child(0) if body is not None and body.named_child_count else None
    if first is None:
        return None
    if first.type == "string":  # recent grammars put the docstring directly in the block
        return _doc_line(_text(src, first))
    if first.type == "expression_statement" and first.named_child_count:
        s = first.named_children[0]
        if s.type == "string":
            return _doc_line(_text(src, s))
    return None


_DOC_STRIP = re.compile(r"^\s*(?:[rRbBuUfF]{0,2}(?:\"\"\"|'''|\"|')|/\*\*+|/\*!?|///?!?|//|\*+(?!/))\s?")


def _without_closing_marker(text: str) -> str:
    """``text`` without a closing ``*/`` (any run of stars before the slash), triple quote, and the spaces
    after it. (A regex searching for the marker rescanned a long run of stars from each of its characters.)"""
    end = text.rstrip()
    if end.endswith(('"""', "'''")):
        return end[:-3]
    if end.endswith("*/"):
        return end[:-1].rstrip("*")
    return text


def _doc_line(raw: str) -> str | None:
    """First meaningful line of a docstring or comment, without comment/quote markers."""
    for line in raw.splitlines():
        cleaned = _without_closing_marker(_DOC_STRIP.sub("", line)).strip()
        if cleaned:
            return cleaned
    return None


def _name_of_declarator(node: Node | None, src: bytes) -> tuple[str, str | None]:
    """(name, scope) of a C/C++ declarator chain: ``Store<T>::put(T v)`` -> ("put", "Store")."""
    while node is not None:
        t = node.type
        if t in ("identifier", "field_identifier", "type_identifier", "destructor_name", "operator_name"):
            return _text(src, node), None
        if t == "qualified_identifier":
            scope = _field(node, "scope")
            name_node = _field(node, "name")
            inner_name, _ = _name_of_declarator(name_node, src)
            scope_text = _text(src, scope)
            if scope is not None and scope.type == "template_type":
                scope_text = _text(src, _field(scope, "name"))
            return inner_name, scope_text or None
        nxt = _field(node, "declarator")
        if nxt is None:
            # e.g. array/parenthesized declarators without a field name
            named = [c for c in node.named_children if c.type not in ("parameter_list", "type_qualifier")]
            nxt = named[0] if named else None
        node = nxt
    return "", None


def _strip_type(text: str) -> str:
    """Bare type name from ``*Server``, ``Store<T>``, ``&'a mut Foo`` ..."""
    text = re.sub(r"<.*", "", text)
    text = re.sub(r"\[.*", "", text)
    return text.lstrip("*&").replace("mut ", "").split("::")[-1].strip()


class _Extractor:
    def __init__(self, parsed: ParsedFile) -> None:
        self.parsed = parsed
        self.src = parsed.source
        self.lang = parsed.language
        self.symbols: list[Symbol] = []

    # -- traversal -----------------------------------------------------------------------------

    def run(self) -> list[Symbol]:
        self._visit(self.parsed.tree.root_node.children, parent=None, owner=None)
        return self.symbols

    def _visit(self, nodes: list[Node], parent: int | None, owner: str | None) -> None:
        leading: list[Node] = []
        for node in nodes:
            if not node.is_named:
                continue
            t = node.type
            if t in _LEADING_TYPES:
                if leading and leading[-1].end_point.row + 1 < node.start_point.row:
                    leading = []  # a blank line separates it from the earlier comment
                leading.append(node)
                continue
            transparent = self._transparent_children(node)
            if transparent is not None:
                self._visit(transparent, parent, owner)
                leading = []
                continue
            decls = self._classify(node, parent, owner)
            if leading and leading[-1].end_point.row + 1 < node.start_point.row:
                leading = []
            for decl, outer in decls:
                self._add(decl, outer, leading if outer is decls[0][1] else [], parent)
            leading = []

    def _add(self, decl: _Decl, outer: Node, leading: list[Node], parent: int | None) -> None:
        src = self.src
        start = leading[0] if leading else outer
        doc = None
        if self.lang == "python":
            doc = _py_docstring(decl.body, src)
        if doc is None:
            comments = [n for n in leading if n.type in _COMMENT_TYPES]
            if comments:
                doc = _doc_line(_text(src, comments[0]) if len(comments) == 1 else
                                "\n".join(_text(src, c) for c in comments))
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
            self._visit(decl.container_body.children, sym.index, decl.owner_of_members())

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
            body = _field(node, "body")
            return body.children if body is not None and body.type == "declaration_list" else None
        return None

    # -- classification ------------------------------------------------------------------------

    def _classify(self, node: Node, parent: int | None, owner: str | None) -> list[tuple[_Decl, Node]]:
        fn = getattr(self, f"_c_{self.lang}", None)
        if fn is None:
            return []
        decl = fn(node, parent, owner)
        if decl is None:
            return []
        if isinstance(decl, list):
            return decl
        return [(decl, node)]

    def _in_class(self, parent: int | None) -> bool:
        return parent is not None and self.symbols[parent].kind in CLASS_KINDS

    def _c_python(self, node: Node, parent: int | None, owner: str | None) -> _Decl | None:
        src = self.src
        t = node.type
        inner = node
        if t == "decorated_definition":
            inner = _field(node, "definition") or node
            t = inner.type
        if t == "function_definition":
            name = _text(src, _field(inner, "name"))
            in_class = self._in_class(parent)
            kind = ("constructor" if name == "__init__" else "method") if in_class else "function"
            return _Decl(kind, name, body=_field(inner, "body"), owner=owner if in_class else None)
        if t == "class_definition":
            body = _field(inner, "body")
            return _Decl("class", _text(src, _field(inner, "name")), body=body, owner=owner, container_body=body)
        if t in ("import_statement", "import_from_statement", "future_import_statement"):
            module = _field(node, "module_name")
            names = [_text(src, c) for c in node.children_by_field_name("name")]
            return _Decl("import", _text(src, module) if module is not None else ", ".join(names))
        if t == "type_alias_statement":
            return _Decl("type", _text(src, _field(node, "left")).split("[")[0], owner=owner)
        expr = node
        if t == "expression_statement" and node.named_child_count:
            expr = node.named_children[0]  # older grammars wrap statements; 0.25+ does not
        if expr.type == "assignment":
            left = _field(expr, "left")
            if left is None or left.type not in ("identifier", "pattern_list", "tuple_pattern"):
                return None
            name = _text(src, left)
            if self._in_class(parent):
                return _Decl("field", name, owner=owner)
            kind = "constant" if name.replace("_", "").replace(",", "").replace(" ", "").isupper() else "variable"
            return _Decl(kind, name, owner=None)
        return None

    def _c_javascript(self, node: Node, parent: int | None, owner: str | None) -> _Decl | list | None:
        src = self.src
        t = node.type
        if t in ("export_statement", "ambient_declaration"):
            inner = _field(node, "declaration")
            if inner is None:
                inner = next((c for c in node.named_children if c.type not in ("decorator", "comment")), None)
            if inner is None or inner.type in ("identifier", "export_clause", "string"):
                return None
            decl = self._c_javascript(inner, parent, owner)
            if isinstance(decl, _Decl):
                return [(decl, node)]
            return decl
        if t == "expression_statement" and node.named_child_count:
            inner = node.named_children[0]
            if inner.type in ("internal_module", "module"):
                return [(d, node) for d, _ in self._classify(inner, parent, owner)] or None
            return None
        if t in ("internal_module", "module"):
            body = _field(node, "body")
            return _Decl("namespace", _text(src, _field(node, "name")), body=body, container_body=body)
        if t in ("function_declaration", "generator_function_declaration", "function_signature"):
            return _Decl("function", _text(src, _field(node, "name")), body=_field(node, "body"))
        if t in ("class_declaration", "abstract_class_declaration", "class"):
            body = _field(node, "body")
            return _Decl("class", _text(src, _field(node, "name")), body=body, owner=owner, container_body=body)
        if t == "interface_declaration":
            return _Decl("interface", _text(src, _field(node, "name")), body=_field(node, "body"))
        if t == "enum_declaration":
            return _Decl("enum", _text(src, _field(node, "name")), body=_field(node, "body"))
        if t == "type_alias_declaration":
            return _Decl("type", _text(src, _field(node, "name")))
        if t in ("lexical_declaration", "variable_declaration"):
            declarators = [c for c in node.named_children if c.type == "variable_declarator"]
            if not declarators:
                return None
            first = declarators[0]
            value = _field(first, "value")
            name = ", ".join(_text(src, _field(d, "name")) for d in declarators)
            if value is not None and value.type in ("arrow_function", "function_expression", "function",
                                                     "generator_function"):
                return _Decl("function", name, body=_field(value, "body"))
            callee = _field(value, "function") if value is not None else None
            if value is not None and value.type == "call_expression" and _text(src, callee) == "require":
                return _Decl("import", name)
            if value is not None and value.type in ("class",):
                body = _field(value, "body")
                return _Decl("class", name, body=body, container_body=body)
            is_const = _text(src, node).startswith("const")
            return _Decl("constant" if is_const else "variable", name)
        if t == "import_statement":
            return _Decl("import", _text(src, _field(node, "source")).strip("'\""))
        # class members
        if t in ("method_definition", "method_signature", "abstract_method_signature"):
            name = _text(src, _field(node, "name"))
            return _Decl("constructor" if name == "constructor" else "method", name,
                         body=_field(node, "body"), owner=owner)
        if t in ("public_field_definition", "field_definition"):
            name_node = _field(node, "name") or _field(node, "property")
            return _Decl("field", _text(src, name_node), owner=owner)
        return None

    _c_typescript = _c_javascript
    _c_tsx = _c_javascript

    def _c_go(self, node: Node, parent: int | None, owner: str | None) -> _Decl | list | None:
        src = self.src
        t = node.type
        if t == "function_declaration":
            return _Decl("function", _text(src, _field(node, "name")), body=_field(node, "body"))
        if t == "method_declaration":
            recv = _field(node, "receiver")
            recv_type = ""
            if recv is not None:
                for p in recv.named_children:
                    recv_type = _strip_type(_text(src, _field(p, "type")))
            return _Decl("method", _text(src, _field(node, "name")), body=_field(node, "body"),
                         owner=recv_type or None)
        if t == "type_declaration":
            specs = [c for c in node.named_children if c.type in ("type_spec", "type_alias")]
            out = []
            for spec in specs:
                ty = _field(spec, "type")
                kind = {"struct_type": "struct", "interface_type": "interface"}.get(ty.type if ty else "", "type")
                body = None
                if ty is not None and kind != "type":
                    body = next((c for c in ty.named_children if c.type in (
                        "field_declaration_list", "method_spec_list")), None) or ty
                decl = _Decl(kind, _text(src, _field(spec, "name")), body=body)
                out.append((decl, node if len(specs) == 1 else spec))
            return out or None
        if t in ("const_declaration", "var_declaration"):
            names = []
            for spec in node.named_children:
                names.extend(_text(src, n) for n in spec.children_by_field_name("name"))
            return _Decl("constant" if t == "const_declaration" else "variable", ", ".join(names))
        if t == "import_declaration":
            return _Decl("import", "imports")
        if t == "package_clause":
            return _Decl("package", _text(src, node.named_children[0]) if node.named_child_count else "")
        return None

    def _c_java(self, node: Node, parent: int | None, owner: str | None) -> _Decl | None:
        src = self.src
        t = node.type
        kinds = {
            "class_declaration": "class",
            "interface_declaration": "interface",
            "enum_declaration": "enum",
            "record_declaration": "record",
            "annotation_type_declaration": "interface",
        }
        if t in kinds:
            body = _field(node, "body")
            return _Decl(kinds[t], _text(src, _field(node, "name")), body=body, owner=owner,
                         container_body=body)
        if t == "method_declaration":
            return _Decl("method", _text(src, _field(node, "name")), body=_field(node, "body"), owner=owner)
        if t in ("constructor_declaration", "compact_constructor_declaration"):
            return _Decl("constructor", _text(src, _field(node, "name")), body=_field(node, "body"), owner=owner)
        if t in ("field_declaration", "constant_declaration"):
            names = [_text(src, _field(d, "name")) for d in node.children_by_field_name("declarator")]
            return _Decl("field", ", ".join(names), owner=owner)
        if t in ("import_declaration", "package_declaration"):
            return _Decl("import" if t == "import_declaration" else "package",
                         _text(src, next(iter(node.named_children), None)))
        return None

    def _c_rust(self, node: Node, parent: int | None, owner: str | None) -> _Decl | None:
        src = self.src
        t = node.type
        if t in ("function_item", "function_signature_item"):
            name = _text(src, _field(node, "name"))
            in_class = self._in_class(parent)
            kind = ("constructor" if name == "new" else "method") if in_class else "function"
            return _Decl(kind, name, body=_field(node, "body"), owner=owner if in_class else None)
        if t == "impl_item":
            ty = _strip_type(_text(src, _field(node, "type")))
            trait = _field(node, "trait")
            name = f"{_text(src, trait)} for {ty}" if trait is not None else ty
            body = _field(node, "body")
            return _Decl("impl", name, body=body, container_body=body, member_owner=ty)
        if t == "trait_item":
            body = _field(node, "body")
            name = _text(src, _field(node, "name"))
            return _Decl("trait", name, body=body, container_body=body)
        if t in ("struct_item", "enum_item", "union_item"):
            kind = {"struct_item": "struct", "enum_item": "enum", "union_item": "union"}[t]
            return _Decl(kind, _text(src, _field(node, "name")), body=_field(node, "body"))
        if t == "mod_item":
            body = _field(node, "body")
            return _Decl("namespace", _text(src, _field(node, "name")), body=body, container_body=body)
        if t in ("const_item", "static_item"):
            return _Decl("constant", _text(src, _field(node, "name")), owner=owner if self._in_class(parent) else None)
        if t == "type_item":
            return _Decl("type", _text(src, _field(node, "name")))
        if t in ("use_declaration", "extern_crate_declaration"):
            return _Decl("import", _text(src, _field(node, "argument") or _field(node, "name")))
        if t == "macro_definition":
            return _Decl("macro", _text(src, _field(node, "name")))
        return None

    def _c_c(self, node: Node, parent: int | None, owner: str | None) -> _Decl | None:
        src = self.src
        t = node.type
        lang = self.lang
        in_class = self._in_class(parent)
        if t == "template_declaration":
            inner = next((c for c in node.named_children if c.type != "template_parameter_list"), None)
            if inner is None:
                return None
            return self._c_c(inner, parent, owner)
        if t == "function_definition":
            name, scope = _name_of_declarator(_field(node, "declarator"), src)
            member_owner = owner if in_class else scope
            if member_owner is not None:
                kind = "constructor" if name == member_owner else "method"
            else:
                kind = "function"
            return _Decl(kind, name, body=_field(node, "body"), owner=member_owner)
        if t in ("declaration", "field_declaration"):
            decl = _field(node, "declarator")
            if decl is None:
                inner_type = _field(node, "type")
                if inner_type is not None and inner_type.type in ("struct_specifier", "class_specifier",
                                                                   "union_specifier", "enum_specifier"):
                    return self._c_c(inner_type, parent, owner)
                return None
            is_function = decl.type == "function_declarator" or (
                decl.type in ("pointer_declarator", "reference_declarator")
                and any(c.type == "function_declarator" for c in decl.named_children))
            name, scope = _name_of_declarator(decl, src)
            if is_function:
                if in_class:
                    kind = "constructor" if name == owner else "method"
                    return _Decl(kind, name, owner=owner)
                return _Decl("function", name, owner=scope)
            if in_class or t == "field_declaration":
                return _Decl("field", name, owner=owner)
            text = _text(src, node)
            kind = "constant" if re.search(r"\b(const|constexpr)\b", text.split("=")[0]) else "variable"
            return _Decl(kind, name)
        if t in ("struct_specifier", "class_specifier", "union_specifier"):
            body = _field(node, "body")
            if body is None:
                return None
            name = _text(src, _field(node, "name"))
            kind = {"struct_specifier": "struct", "class_specifier": "class", "union_specifier": "union"}[t]
            container = body if lang == "cpp" else None
            return _Decl(kind, _strip_type(name), body=body, owner=owner, container_body=container)
        if t == "enum_specifier":
            if _field(node, "body") is None:
                return None
            return _Decl("enum", _text(src, _field(node, "name")), body=_field(node, "body"))
        if t == "type_definition":
            inner = _field(node, "type")
            names = [_text(src, d) for d in node.children_by_field_name("declarator")]
            kind = "type"
            inner_body = _field(inner, "body") if inner is not None else None
            if inner is not None and inner_body is not None:
                kind = {"struct_specifier": "struct", "union_specifier": "union", "enum_specifier": "enum"}.get(
                    inner.type, "type")
            return _Decl(kind, ", ".join(names), body=inner_body)
        if t in ("alias_declaration", "type_alias_declaration"):
            return _Decl("type", _text(src, _field(node, "name")))
        if t == "namespace_definition":
            body = _field(node, "body")
            return _Decl("namespace", _text(src, _field(node, "name")), body=body, container_body=body)
        if t == "preproc_include":
            return _Decl("import", _text(src, _field(node, "path")))
        if t in ("using_declaration", "namespace_alias_definition"):
            return _Decl("import", _text(src, node).removesuffix(";"))
        if t == "preproc_def":
            return _Decl("constant", _text(src, _field(node, "name")))
        if t == "preproc_function_def":
            return _Decl("macro", _text(src, _field(node, "name")))
        return None

    _c_cpp = _c_c


def _last_line(node: Node) -> int:
    """Last line a node occupies; a node ending at column 0 (trailing newline) ends on the line before."""
    end = node.end_point
    return end.row - 1 if end.column == 0 and end.row > node.start_point.row else end.row


def extract_symbols(parsed: ParsedFile) -> FileSymbols:
    """Symbol table of one parsed file version (memoized on it).

    When this version is an edit of one whose table is known, and the edit lies inside one
    function's body, the table is the previous one shifted past the edit: the extractor never
    looks into function bodies, so such an edit cannot add or remove a symbol. Rebuilding costs
    ~15 us per symbol (5-15 ms on a 2,000-5,000-line file), shifting a tenth of that.
    """
    table = cheap_symbols(parsed)
    if table is None:
        table = FileSymbols(parsed=parsed, symbols=_Extractor(parsed).run())
        parsed.derived["symbols"] = table
    return table


def _shifted_symbols(parsed: ParsedFile, previous: ParsedFile, start: int, old_end: int,
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
    node = _span_node(parsed, fn, end)
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
        body, first = _first_statement(previous, fn)
        if first is None:
            return None
        if (_py_docstring(body, previous.source) is not None and start <= first.end_byte
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


# What the cursor line's blanking leaves (see indexer.parsing.blank_line_bytes): spaces and the
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
            first = _first_statement(previous, holder)[1]
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


def _span_node(parsed: ParsedFile, sym: Symbol, end: int) -> Node | None:
    """``sym``'s node in ``parsed``'s tree when it is still one node of its type from its
    declaration's start to ``end``, else None."""
    node = parsed.tree.root_node.descendant_for_byte_range(sym.decl_start_byte, end)
    if node is not None and node.type == sym.node_type and node.start_byte == sym.decl_start_byte \
            and node.end_byte == end:
        return node
    return None


def _spans(parsed: ParsedFile, sym: Symbol, end: int) -> bool:
    """Is ``sym`` still one node of its type from its declaration's start to ``end`` in the new tree?"""
    return _span_node(parsed, sym, end) is not None


def _same_body_start(parsed: ParsedFile, table: FileSymbols, fn: Symbol, node: Node, start: int) -> bool:
    """Does ``fn``'s body (``node`` is fn's node in the new tree) still start where it did (edited
    at ``start``)? In a broken tree error recovery can take a half-typed first statement out of
    the body (a header ``if`` with nothing after it), which the extractor would see."""
    if fn.body_start_byte is None or fn.body_start_byte >= start:
        return True  # (an edit before the body moves it: checked by the shift itself)
    extractor = _Extractor(parsed)
    extractor.symbols = table.symbols  # (for the parent's kind only)
    decls = extractor._classify(node, fn.parent, fn.owner)
    return any(d.body is not None and d.body.start_byte == fn.body_start_byte and d.name == fn.name for d, _ in decls)


def _first_statement(version: ParsedFile, sym: Symbol) -> tuple[Node | None, Node | None]:
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
    line_delta = _line_delta(previous, parsed, start, old_end, new_end)
    return [_moved_symbol(s, start, old_end, new_end, line_delta, new_doc if s is fn and new_doc is not None else s.doc)
            for s in table.symbols]


def _line_delta(previous: ParsedFile, parsed: ParsedFile, start: int, old_end: int, new_end: int) -> int:
    return parsed.source.count(b"\n", start, new_end) - previous.source.count(b"\n", start, old_end)


def _moved_symbol(s: Symbol, start: int, old_end: int, new_end: int, line_delta: int, doc: str | None,
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


# ---------------------------------------------------------------------------------------------
# Splicing: re-extract only the declarations an edit touched


def _spliced_symbols(parsed: ParsedFile, previous: ParsedFile, start: int, old_end: int,
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
    line_delta = _line_delta(previous, parsed, start, old_end, new_end)
    for level in [*containers, None]:
        spliced = _splice_level(parsed, previous, table, level, lo, hi, start, old_end, new_end, line_delta)
        if spliced is not None:
            return spliced
    return None


def _level_members(version: ParsedFile, symbols: list[Symbol], level: Symbol | None,
                   end: int) -> tuple[list[Node], str | None, _Extractor] | None:
    """The nodes a full extraction visits at ``level`` (a container ending at ``end`` in
    ``version``, or the module), the owner it gives them, and an extractor over ``symbols``."""
    extractor = _Extractor(version)
    extractor.symbols = symbols
    if level is None:
        return version.tree.root_node.children, None, extractor
    node = _span_node(version, level, end)
    if node is None:
        return None
    for decl, outer in extractor._classify(node, level.parent, level.owner):
        if outer.start_byte == node.start_byte and decl.container_body is not None:
            if decl.name != level.name:
                return None
            return decl.container_body.children, decl.owner_of_members(), extractor
    return None


def _ends_run(node: Node) -> bool:
    """Does ``node`` end a run of leading comments (a named node that is not one)?"""
    return node.is_named and node.type not in _LEADING_TYPES


def _splice_level(parsed: ParsedFile, previous: ParsedFile, table: FileSymbols, level: Symbol | None, lo: int,
                  hi: int, start: int, old_end: int, new_end: int, line_delta: int) -> list[Symbol] | None:
    """The table spliced at ``level`` (a container, or None: the module), or None."""
    delta = new_end - old_end
    symbols = table.symbols
    prefix_end = level.index + 1 if level is not None else 0
    # symbols up to the level's own (its ancestors and itself grow by the edit), for _classify
    head = [_moved_symbol(s, start, old_end, new_end, line_delta, s.doc) for s in symbols[:prefix_end]]
    new_level = head[-1] if level is not None else None
    found_new = _level_members(parsed, head, new_level, new_level.end_byte if new_level else 0)
    found_old = _level_members(previous, symbols, level, level.end_byte if level else 0)
    if found_new is None or found_old is None:
        return None
    nodes, owner, extractor = found_new
    old_nodes = found_old[0]
    if level is not None and parsed.language == "python":
        body = _first_statement(parsed, new_level)[1]  # type: ignore[arg-type]
        old_body = _first_statement(previous, level)[1]
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
    while first > 0 and (not nodes[first - 1].is_named or nodes[first - 1].type in _LEADING_TYPES):
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
    head.extend(_moved_symbol(s, start, old_end, new_end, line_delta, s.doc) for s in symbols[prefix_end:k0])
    extractor._visit(nodes[first : last + 1], level.index if level is not None else None, owner)
    out = extractor.symbols
    shift = len(out) - k1
    out.extend(_moved_symbol(s, start, old_end, new_end, line_delta, s.doc, shift, k1) for s in symbols[k1:])
    return out


def _new_py_doc(parsed: ParsedFile, body_start: int) -> str | None:
    """The doc line of the Python block starting at ``body_start`` in the new tree."""
    node = parsed.tree.root_node.descendant_for_byte_range(body_start, body_start)
    while node is not None and not (node.type == "block" and node.start_byte == body_start):
        node = node.parent
    return _py_docstring(node, parsed.source) if node is not None else None


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
        if _doc_line(src[line_start:line_end].decode("utf-8", "replace")):
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


def cheap_symbols(parsed: ParsedFile, _depth: int = 0) -> FileSymbols | None:
    """The symbol table when it is known or can be shifted from the previous version's, else None
    (the caller decides whether a full extraction is worth it)."""
    cached = parsed.derived.get("symbols")
    if isinstance(cached, FileSymbols):
        return cached
    edit = parsed.derived.get(EDIT_KEY)  # the predecessor forgets its own when a successor comes
    if edit is not None and _depth < 2 and "symbols" not in edit[0].derived:
        # A halfway version (two separate edits parsed one after the other) shifts first.
        cheap_symbols(edit[0], _depth + 1)
    shifted = _shifted_symbols(parsed, *edit) if edit is not None else None
    lookups: dict[str, object] = {}
    if shifted is None:
        spliced = _spliced_symbols(parsed, *edit) if edit is not None else None
        if spliced is None:
            return None
        shifted = spliced, None
    elif edit is not None:
        lookups = dict(edit[0].derived["symbols"].lookups)  # type: ignore[union-attr]
    symbols, broken_in = shifted
    table = FileSymbols(parsed=parsed, symbols=symbols, shifted=True, provisional=broken_in is not None,
                        broken_in=broken_in, lookups=lookups)
    parsed.derived["symbols"] = table
    return table


# ---------------------------------------------------------------------------------------------
# References


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


def _query(language: str) -> Query:
    q = _queries.get(language)
    if q is None:
        q = Query(_language_of(language), _REF_QUERIES[language])
        _queries[language] = q
    return q


def _language_of(language: str):  # type: ignore[no-untyped-def]
    from tree_sitter_language_pack import get_language

    return get_language(language)  # type: ignore[arg-type]


def references_in_range(parsed: ParsedFile, start_byte: int, end_byte: int,
                        names: frozenset[bytes] | set[bytes] | None = None) -> list[Reference]:
    """Identifier uses inside a byte range, from the syntax tree (so strings and comments never
    count); with ``names``, only uses of those (a caller resolving against a symbol table skips
    the locals and builtins that make up most of a body)."""
    if parsed.language not in _REF_QUERIES:
        return []
    cursor = QueryCursor(_query(parsed.language))
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
                    named = _field(parent, name_field)
                    if named is not None and named.id == node.id:
                        recv = _field(parent, recv_field)
                        # Java's helper() without a receiver is a bare name (implicit this).
                        receiver = _text(src, recv) if recv is not None else None
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


_error_queries: dict[str, Query] = {}


def has_wide_error(parsed: ParsedFile, max_lines: int = 3) -> bool:
    """True when some error node spans more than ``max_lines`` lines: local damage (a half-typed
    expression) leaves the declarations intact, a wide error has swallowed some of them."""
    q = _error_queries.get(parsed.language)
    if q is None:
        q = Query(_language_of(parsed.language), "(ERROR) @e")
        _error_queries[parsed.language] = q
    for nodes in QueryCursor(q).captures(parsed.tree.root_node).values():
        for node in nodes:
            if node.end_point.row - node.start_point.row > max_lines:
                return True
    return False


def warm_up(languages: frozenset[str] | None = None) -> None:
    """Load grammars, parsers and reference queries ahead of the first request (~10 ms each cold)."""
    from indexer.parsing import SUPPORTED_LANGUAGES, get_parser

    for lang in languages or SUPPORTED_LANGUAGES:
        get_parser(lang)
        _query(lang)
        _error_queries.setdefault(lang, Query(_language_of(lang), "(ERROR) @e"))
