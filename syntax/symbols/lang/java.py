"""Java declarations: classes, interfaces, enums, records, their members, imports and the package."""

from __future__ import annotations

from tree_sitter import Node

from syntax.symbols.decl import Classified, Context, Decl, field_node, node_text


def classify_java(ctx: Context, node: Node, parent: int | None, owner: str | None) -> Classified:
    """What ``node`` declares in Java (None: not a declaration)."""
    src = ctx.src
    t = node.type
    kinds = {
        "class_declaration": "class",
        "interface_declaration": "interface",
        "enum_declaration": "enum",
        "record_declaration": "record",
        "annotation_type_declaration": "interface",
    }
    if t in kinds:
        body = field_node(node, "body")
        return Decl(kinds[t], node_text(src, field_node(node, "name")), body=body, owner=owner,
                     container_body=body)
    if t == "method_declaration":
        return Decl("method", node_text(src, field_node(node, "name")), body=field_node(node, "body"), owner=owner)
    if t in ("constructor_declaration", "compact_constructor_declaration"):
        return Decl("constructor", node_text(src, field_node(node, "name")), body=field_node(node, "body"), owner=owner)
    if t in ("field_declaration", "constant_declaration"):
        names = [node_text(src, field_node(d, "name")) for d in node.children_by_field_name("declarator")]
        return Decl("field", ", ".join(names), owner=owner)
    if t in ("import_declaration", "package_declaration"):
        return Decl("import" if t == "import_declaration" else "package",
                     node_text(src, next(iter(node.named_children), None)))
    return None
