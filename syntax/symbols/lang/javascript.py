"""JavaScript, TypeScript and TSX declarations (one grammar family, one classifier)."""

from __future__ import annotations

from tree_sitter import Node

from syntax.symbols.decl import Classified, Context, Decl, field_node, node_text


def classify_javascript(ctx: Context, node: Node, parent: int | None, owner: str | None) -> Classified:
    """What ``node`` declares in JavaScript, TypeScript or TSX (None: not a declaration)."""
    src = ctx.src
    t = node.type
    if t in ("export_statement", "ambient_declaration"):
        inner = field_node(node, "declaration")
        if inner is None:
            inner = next((c for c in node.named_children if c.type not in ("decorator", "comment")), None)
        if inner is None or inner.type in ("identifier", "export_clause", "string"):
            return None
        decl = classify_javascript(ctx, inner, parent, owner)
        if isinstance(decl, Decl):
            return [(decl, node)]
        return decl
    if t == "expression_statement" and node.named_child_count:
        inner = node.named_children[0]
        if inner.type in ("internal_module", "module"):
            return [(d, node) for d, _ in ctx.classify(inner, parent, owner)] or None
        return None
    if t in ("internal_module", "module"):
        body = field_node(node, "body")
        return Decl("namespace", node_text(src, field_node(node, "name")), body=body, container_body=body)
    if t in ("function_declaration", "generator_function_declaration", "function_signature"):
        return Decl("function", node_text(src, field_node(node, "name")), body=field_node(node, "body"))
    if t in ("class_declaration", "abstract_class_declaration", "class"):
        body = field_node(node, "body")
        return Decl("class", node_text(src, field_node(node, "name")), body=body, owner=owner, container_body=body)
    if t == "interface_declaration":
        return Decl("interface", node_text(src, field_node(node, "name")), body=field_node(node, "body"))
    if t == "enum_declaration":
        return Decl("enum", node_text(src, field_node(node, "name")), body=field_node(node, "body"))
    if t == "type_alias_declaration":
        return Decl("type", node_text(src, field_node(node, "name")))
    if t in ("lexical_declaration", "variable_declaration"):
        declarators = [c for c in node.named_children if c.type == "variable_declarator"]
        if not declarators:
            return None
        first = declarators[0]
        value = field_node(first, "value")
        name = ", ".join(node_text(src, field_node(d, "name")) for d in declarators)
        if value is not None and value.type in ("arrow_function", "function_expression", "function",
                                                 "generator_function"):
            return Decl("function", name, body=field_node(value, "body"))
        callee = field_node(value, "function") if value is not None else None
        if value is not None and value.type == "call_expression" and node_text(src, callee) == "require":
            return Decl("import", name)
        if value is not None and value.type in ("class",):
            body = field_node(value, "body")
            return Decl("class", name, body=body, container_body=body)
        is_const = node_text(src, node).startswith("const")
        return Decl("constant" if is_const else "variable", name)
    if t == "import_statement":
        return Decl("import", node_text(src, field_node(node, "source")).strip("'\""))
    # class members
    if t in ("method_definition", "method_signature", "abstract_method_signature"):
        name = node_text(src, field_node(node, "name"))
        return Decl("constructor" if name == "constructor" else "method", name,
                     body=field_node(node, "body"), owner=owner)
    if t in ("public_field_definition", "field_definition"):
        name_node = field_node(node, "name") or field_node(node, "property")
        return Decl("field", node_text(src, name_node), owner=owner)
    return None
