"""C and C++ declarations (one classifier: C++ adds classes, namespaces, templates and scopes)."""

from __future__ import annotations

import re

from tree_sitter import Node

from syntax.symbols.decl import Classified, Context, Decl, field_node, node_text, strip_type


def classify_c(ctx: Context, node: Node, parent: int | None, owner: str | None) -> Classified:
    """What ``node`` declares in C or C++ (None: not a declaration)."""
    src = ctx.src
    t = node.type
    lang = ctx.lang
    in_class = ctx.in_class(parent)
    if t == "template_declaration":
        inner = next((c for c in node.named_children if c.type != "template_parameter_list"), None)
        if inner is None:
            return None
        return classify_c(ctx, inner, parent, owner)
    if t == "function_definition":
        name, scope = _name_of_declarator(field_node(node, "declarator"), src)
        member_owner = owner if in_class else scope
        if member_owner is not None:
            kind = "constructor" if name == member_owner else "method"
        else:
            kind = "function"
        return Decl(kind, name, body=field_node(node, "body"), owner=member_owner)
    if t in ("declaration", "field_declaration"):
        decl = field_node(node, "declarator")
        if decl is None:
            inner_type = field_node(node, "type")
            if inner_type is not None and inner_type.type in ("struct_specifier", "class_specifier",
                                                               "union_specifier", "enum_specifier"):
                return classify_c(ctx, inner_type, parent, owner)
            return None
        is_function = decl.type == "function_declarator" or (
            decl.type in ("pointer_declarator", "reference_declarator")
            and any(c.type == "function_declarator" for c in decl.named_children))
        name, scope = _name_of_declarator(decl, src)
        if is_function:
            if in_class:
                kind = "constructor" if name == owner else "method"
                return Decl(kind, name, owner=owner)
            return Decl("function", name, owner=scope)
        if in_class or t == "field_declaration":
            return Decl("field", name, owner=owner)
        text = node_text(src, node)
        kind = "constant" if re.search(r"\b(const|constexpr)\b", text.split("=")[0]) else "variable"
        return Decl(kind, name)
    if t in ("struct_specifier", "class_specifier", "union_specifier"):
        body = field_node(node, "body")
        if body is None:
            return None
        name = node_text(src, field_node(node, "name"))
        kind = {"struct_specifier": "struct", "class_specifier": "class", "union_specifier": "union"}[t]
        container = body if lang == "cpp" else None
        return Decl(kind, strip_type(name), body=body, owner=owner, container_body=container)
    if t == "enum_specifier":
        if field_node(node, "body") is None:
            return None
        return Decl("enum", node_text(src, field_node(node, "name")), body=field_node(node, "body"))
    if t == "type_definition":
        inner = field_node(node, "type")
        names = [node_text(src, d) for d in node.children_by_field_name("declarator")]
        kind = "type"
        inner_body = field_node(inner, "body") if inner is not None else None
        if inner is not None and inner_body is not None:
            kind = {"struct_specifier": "struct", "union_specifier": "union", "enum_specifier": "enum"}.get(
                inner.type, "type")
        return Decl(kind, ", ".join(names), body=inner_body)
    if t in ("alias_declaration", "type_alias_declaration"):
        return Decl("type", node_text(src, field_node(node, "name")))
    if t == "namespace_definition":
        body = field_node(node, "body")
        return Decl("namespace", node_text(src, field_node(node, "name")), body=body, container_body=body)
    if t == "preproc_include":
        return Decl("import", node_text(src, field_node(node, "path")))
    if t in ("using_declaration", "namespace_alias_definition"):
        return Decl("import", node_text(src, node).removesuffix(";"))
    if t == "preproc_def":
        return Decl("constant", node_text(src, field_node(node, "name")))
    if t == "preproc_function_def":
        return Decl("macro", node_text(src, field_node(node, "name")))
    return None


def _name_of_declarator(node: Node | None, src: bytes) -> tuple[str, str | None]:
    """(name, scope) of a C/C++ declarator chain: ``Store<T>::put(T v)`` -> ("put", "Store")."""
    while node is not None:
        t = node.type
        if t in ("identifier", "field_identifier", "type_identifier", "destructor_name", "operator_name"):
            return node_text(src, node), None
        if t == "qualified_identifier":
            scope = field_node(node, "scope")
            name_node = field_node(node, "name")
            inner_name, _ = _name_of_declarator(name_node, src)
            scope_text = node_text(src, scope)
            if scope is not None and scope.type == "template_type":
                scope_text = node_text(src, field_node(scope, "name"))
            return inner_name, scope_text or None
        nxt = field_node(node, "declarator")
        if nxt is None:
            # e.g. array/parenthesized declarators without a field name
            named = [c for c in node.named_children if c.type not in ("parameter_list", "type_qualifier")]
            nxt = named[0] if named else None
        node = nxt
    return "", None
