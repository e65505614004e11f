"""A declaration's doc: the first line of its docstring (Python) or of the comment before it."""

from __future__ import annotations

import re

from tree_sitter import Node

from syntax.symbols.decl import node_text


def py_docstring(body: Node | None, src: bytes) -> str | None:
    """The doc line of the docstring opening the Python block ``body``, if there is one."""
    # not named_children: that builds every node; an empty body (being typed) has no child at all
    first = body.named_child(0) if body is not None and body.named_child_count else None
    if first is None:
        return None
    if first.type == "string":  # recent grammars put the docstring directly in the block
        return doc_line(node_text(src, first))
    if first.type == "expression_statement" and first.named_child_count:
        s = first.named_children[0]
        if s.type == "string":
            return doc_line(node_text(src, s))
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


def doc_line(raw: str) -> str | None:
    """First meaningful line of a docstring or comment, without comment/quote markers."""
    for line in raw.splitlines():
        cleaned = _without_closing_marker(_DOC_STRIP.sub("", line)).strip()
        if cleaned:
            return cleaned
    return None
