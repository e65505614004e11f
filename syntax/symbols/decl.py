"""What a language classifier says about one declaration node (``Decl``), what it is given to say
it (``Context``), and the node readers the classifiers share."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from tree_sitter import Node

from syntax.symbols.model import CLASS_KINDS


@dataclass
class Decl:
    """What a language classifier says about one declaration node."""

    kind: str
    name: str
    body: Node | None = None
    owner: str | None = None
    container_body: Node | None = None  # members to extract below this declaration
    member_owner: str | None = None  # owner of the members; defaults to the class name

    def owner_of_members(self) -> str | None:
        return self.member_owner or (self.name if self.kind in CLASS_KINDS else self.owner)


class Context(Protocol):
    """The extraction a classifier works for: the source, its language and the symbols so far."""

    src: bytes
    lang: str

    def in_class(self, parent: int | None) -> bool:
        """Is the symbol at index ``parent`` class-like (so a declaration in it is a member)?"""
        ...

    def classify(self, node: Node, parent: int | None, owner: str | None) -> list[tuple[Decl, Node]]:
        """``node`` classified by its language's classifier (for wrappers holding a declaration)."""
        ...


# One declaration, or several each with the node its lines come from (Go's grouped types, a JS
# export), or None: not a declaration.
Classified: TypeAlias = Decl | list[tuple[Decl, Node]] | None
Classifier: TypeAlias = Callable[[Context, Node, int | None, str | None], Classified]


def node_text(src: bytes, node: Node | None) -> str:
    if node is None:
        return ""
    return src[node.start_byte : node.end_byte].decode("utf-8", "replace")


def field_node(node: Node, name: str) -> Node | None:
    return node.child_by_field_name(name)


def strip_type(text: str) -> str:
    """Bare type name from ``*Server``, ``Store<T>``, ``&'a mut Foo`` ..."""
    text = re.sub(r"<.*", "", text)
    text = re.sub(r"\[.*", "", text)
    return text.lstrip("*&").replace("mut ", "").split("::")[-1].strip()
