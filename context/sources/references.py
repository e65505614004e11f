"""Same-file functions, classes and constants that the code around the cursor refers to.

Identifiers come from the syntax tree of the enclosing block (so names in strings and comments
never count) and are resolved against the file's symbol table: bare names against module-level
symbols, ``self.x``/``this.x``/receiver accesses against the enclosing class's members, and
``Type.x`` against that type's members. Nearest use first: a helper called on the line above the
cursor matters more than one used 200 lines up.
"""

from __future__ import annotations

from typing import NamedTuple

from context.packing.blocks import symbol_candidate
from context.packing.pack import TIER_REFERENCED, Candidate
from syntax.summaries import Outline
from syntax.symbols.model import DECLARATION_KINDS, FileSymbols, Symbol
from syntax.symbols.references import Reference, line_references, references_in_range

SELF_NAMES: dict[str, frozenset[str]] = {
    "python": frozenset({"self", "cls"}),
    "javascript": frozenset({"this"}),
    "typescript": frozenset({"this"}),
    "tsx": frozenset({"this"}),
    "java": frozenset({"this"}),
    "rust": frozenset({"self", "Self"}),
    "cpp": frozenset({"this", "(*this)"}),
    "c": frozenset(),
    "go": frozenset(),
}
# Languages where a bare name inside a method may be a member (implicit this).
IMPLICIT_MEMBERS: frozenset[str] = frozenset({"java", "cpp"})


def _go_receiver_name(table: FileSymbols, sym: Symbol | None) -> str | None:
    if sym is None or table.language != "go" or sym.kind != "method":
        return None
    head = table.parsed.text(sym.decl_start_byte, sym.body_start_byte or sym.end_byte)
    # func (s *Server) Handle(...)
    inside = head.split("(", 1)[1].split(")", 1)[0].strip() if "(" in head else ""
    parts = inside.split()
    return parts[0] if len(parts) >= 2 else None


class _Lookups(NamedTuple):
    top_by_name: dict[str, list[int]]  # bare name -> module-level symbols (indices)
    members_by_owner: dict[str, dict[str, list[int]]]  # owner -> member name -> symbols
    names: frozenset[bytes]  # every name either can match, for references_in_range


def _lookups(table: FileSymbols) -> _Lookups:
    """Per table (and carried over while it is only shifted: see FileSymbols.lookups)."""
    found = table.lookups.get("references")
    if isinstance(found, _Lookups):
        return found
    top_by_name: dict[str, list[int]] = {}
    for s in table.top_level():
        if s.kind in DECLARATION_KINDS or s.kind == "namespace":
            continue
        for part in s.name.split(", "):
            top_by_name.setdefault(part, []).append(s.index)
    members_by_owner: dict[str, dict[str, list[int]]] = {}
    for s in table.symbols:
        if s.owner and s.kind not in DECLARATION_KINDS:
            members_by_owner.setdefault(s.owner, {}).setdefault(s.name, []).append(s.index)
    names = frozenset(n.encode("utf-8") for n in (*top_by_name, *(m for ms in members_by_owner.values() for m in ms)))
    table.lookups["references"] = found = _Lookups(top_by_name, members_by_owner, names)
    return found


def resolve(
    table: FileSymbols, refs: list[Reference], enclosing: Symbol | None, cursor_line: int
) -> dict[int, tuple[int, int, int]]:
    """symbol index -> (nearest distance in lines, number of uses, first use line)."""
    lang = table.language
    symbols = table.symbols
    lookups = _lookups(table)
    top_by_name, members_by_owner = lookups.top_by_name, lookups.members_by_owner
    owner = enclosing.owner if enclosing is not None else None
    self_names = set(SELF_NAMES.get(lang, frozenset()))
    recv = _go_receiver_name(table, enclosing)
    if recv:
        self_names.add(recv)
    hits: dict[int, tuple[int, int, int]] = {}

    def hit(sym: Symbol, ref: Reference) -> None:
        if sym.contains_line(cursor_line):
            return  # the enclosing block or class itself
        dist = abs(ref.line - cursor_line)
        prev = hits.get(sym.index)
        if prev is None:
            hits[sym.index] = (dist, 1, ref.line)
        else:
            hits[sym.index] = (min(prev[0], dist), prev[1] + 1, min(prev[2], ref.line))

    for ref in refs:
        if ref.is_member:
            target_owner: str | None = None
            if ref.receiver is not None and ref.receiver in self_names:
                target_owner = owner
            elif ref.receiver is not None and ref.receiver in members_by_owner:
                target_owner = ref.receiver  # Type.member / Type::member
            if target_owner is None:
                continue
            for i in members_by_owner.get(target_owner, {}).get(ref.name, ()):
                hit(symbols[i], ref)
            continue
        if lang in IMPLICIT_MEMBERS and owner is not None:
            members = members_by_owner.get(owner, {}).get(ref.name)
            if members:
                for i in members:
                    hit(symbols[i], ref)
                continue
        for i in top_by_name.get(ref.name, ()):
            hit(symbols[i], ref)
    return hits


def referenced_candidates(
    outline: Outline,
    region: tuple[int, int],
    cursor_line: int,
    enclosing: Symbol | None,
    exclude: set[int] | frozenset[int] = frozenset(),
) -> list[Candidate]:
    """Candidates for the symbols used in the byte range ``region``, nearest use first."""
    table, parsed = outline.table, outline.parsed
    # only the names resolve() can match (locals and builtins make up most of a body)
    refs = references_in_range(parsed, region[0], region[1], _lookups(table).names)
    blanked = parsed.blanked_line
    if blanked is not None and region[0] <= parsed.line_byte(blanked) < region[1]:
        refs += line_references(parsed, blanked)  # the cursor line is not in the tree
    hits = resolve(table, refs, enclosing, cursor_line)
    out: list[Candidate] = []
    for index, (dist, uses, first_line) in hits.items():
        if index in exclude:
            continue
        sym = table.symbols[index]
        rank = dist - min(uses, 5) * 0.1  # distance first; repeated use breaks ties
        out.append(symbol_candidate(
            outline, sym, tier=TIER_REFERENCED, rank=rank,
            reason=f"referenced near the cursor (line {first_line + 1}, {uses} use{'s' if uses > 1 else ''})",
        ))
    return out
