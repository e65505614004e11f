"""The symbol table of one parsed file version: ``Symbol`` (one declaration) and ``FileSymbols``.

Lines are 0-based and inclusive.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from syntax.parsed_file import ParsedFile

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
    # syntax.symbols.shift) until the tree is whole again.
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
