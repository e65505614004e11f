"""Rust declarations: functions, impls (their methods owned by the type), traits, types, modules, uses."""

from __future__ import annotations

from tree_sitter import Node

from syntax.symbols.decl import Classified, Context, Decl, field_node, node_text, strip_type


def classify_rust(ctx: Context, node: Node, parent: int | None, owner: str | None) -> Classified:
    """What ``node`` declares in Rust (None: not a declaration)."""
    src = ctx.src
    t = node.type
    if t in ("function_item", "function_signature_item"):
        name = node_text(src, field_node(node, "name"))
        in_class = ctx.in_class(parent)
        kind = ("constructor" if name == "new" else "method") if in_class else "function"
        return Decl(kind, name, body=field_node(node, "body"), owner=owner if in_class else None)
    if t == "impl_item":
        ty = strip_type(node_text(src, field_node(node, "type")))
        trait = field_node(node, "trait")
        name = f"{node_text(src, trait)} for {ty}" if trait is not None else ty
        body = field_node(node, "body")
        return Decl("impl", name, body=body, container_body=body, member_owner=ty)
    if t == "trait_item":
        body = field_node(node, "body")
        name = node_text(src, field_node(node, "name"))
        return Decl("trait", name, body=body, container_body=body)
    if t in ("struct_item", "enum_item", "union_item"):
        kind = {"struct_item": "struct", "enum_item": "enum", "union_item": "union"}[t]
        return Decl(kind, node_text(src, field_node(node, "name")), body=field_node(node, "body"))
    if t == "mod_item":
        body = field_node(node, "body")
        return Decl("namespace", node_text(src, field_node(node, "name")), body=body, container_body=body)
    if t in ("const_item", "static_item"):
        return Decl("constant", node_text(src, field_node(node, "name")), owner=owner if ctx.in_class(parent) else None)
    if t == "type_item":
        return Decl("type", node_text(src, field_node(node, "name")))
    if t in ("use_declaration", "extern_crate_declaration"):
        return Decl("import", node_text(src, field_node(node, "argument") or field_node(node, "name")))
    if t == "macro_definition":
        return Decl("macro", node_text(src, field_node(node, "name")))
    return None
