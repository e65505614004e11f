"""Python declarations: functions, methods, classes, imports, type aliases, module and class assignments."""

from __future__ import annotations

from tree_sitter import Node

from syntax.symbols.decl import Classified, Context, Decl, field_node, node_text


def classify_python(ctx: Context, node: Node, parent: int | None, owner: str | None) -> Classified:
    """What ``node`` declares in Python (None: not a declaration)."""
    src = ctx.src
    t = node.type
    inner = node
    if t == "decorated_definition":
        inner = field_node(node, "definition") or node
        t = inner.type
    if t == "function_definition":
        name = node_text(src, field_node(inner, "name"))
        in_class = ctx.in_class(parent)
        kind = ("constructor" if name == "__init__" else "method") if in_class else "function"
        return Decl(kind, name, body=field_node(inner, "body"), owner=owner if in_class else None)
    if t == "class_definition":
        body = field_node(inner, "body")
        return Decl("class", node_text(src, field_node(inner, "name")), body=body, owner=owner, container_body=body)
    if t in ("import_statement", "import_from_statement", "future_import_statement"):
        module = field_node(node, "module_name")
        names = [node_text(src, c) for c in node.children_by_field_name("name")]
        return Decl("import", node_text(src, module) if module is not None else ", ".join(names))
    if t == "type_alias_statement":
        return Decl("type", node_text(src, field_node(node, "left")).split("[")[0], owner=owner)
    expr = node
    if t == "expression_statement" and node.named_child_count:
        expr = node.named_children[0]  # older grammars wrap statements; 0.25+ does not
    if expr.type == "assignment":
        left = field_node(expr, "left")
        if left is None or left.type not in ("identifier", "pattern_list", "tuple_pattern"):
            return None
        name = node_text(src, left)
        if ctx.in_class(parent):
            return Decl("field", name, owner=owner)
        kind = "constant" if name.replace("_", "").replace(",", "").replace(" ", "").isupper() else "variable"
        return Decl(kind, name, owner=None)
    return None
