"""Go declarations: functions, methods (owned by their receiver's type), types, constants, imports."""

from __future__ import annotations

from tree_sitter import Node

from syntax.symbols.decl import Classified, Context, Decl, field_node, node_text, strip_type


def classify_go(ctx: Context, node: Node, parent: int | None, owner: str | None) -> Classified:
    """What ``node`` declares in Go (None: not a declaration)."""
    src = ctx.src
    t = node.type
    if t == "function_declaration":
        return Decl("function", node_text(src, field_node(node, "name")), body=field_node(node, "body"))
    if t == "method_declaration":
        recv = field_node(node, "receiver")
        recv_type = ""
        if recv is not None:
            for p in recv.named_children:
                recv_type = strip_type(node_text(src, field_node(p, "type")))
        return Decl("method", node_text(src, field_node(node, "name")), body=field_node(node, "body"),
                     owner=recv_type or None)
    if t == "type_declaration":
        specs = [c for c in node.named_children if c.type in ("type_spec", "type_alias")]
        out = []
        for spec in specs:
            ty = field_node(spec, "type")
            kind = {"struct_type": "struct", "interface_type": "interface"}.get(ty.type if ty else "", "type")
            body = None
            if ty is not None and kind != "type":
                body = next((c for c in ty.named_children if c.type in (
                    "field_declaration_list", "method_spec_list")), None) or ty
            decl = Decl(kind, node_text(src, field_node(spec, "name")), body=body)
            out.append((decl, node if len(specs) == 1 else spec))
        return out or None
    if t in ("const_declaration", "var_declaration"):
        names = []
        for spec in node.named_children:
            names.extend(node_text(src, n) for n in spec.children_by_field_name("name"))
        return Decl("constant" if t == "const_declaration" else "variable", ", ".join(names))
    if t == "import_declaration":
        return Decl("import", "imports")
    if t == "package_clause":
        return Decl("package", node_text(src, node.named_children[0]) if node.named_child_count else "")
    return None
