"""The enclosing class's head: its declaration line(s) and docstring, fields and constructor.

"Class" is per language: a class/struct/interface body around the cursor; for Go methods the
receiver's struct type and its ``NewType`` constructor; for Rust the ``impl`` block plus the
struct it implements and ``new``; for C++ out-of-class definitions (``Store<T>::put``) the
class named by the scope.
"""

from __future__ import annotations

from context.packing.blocks import symbol_candidate
from context.packing.pack import TIER_CLASS_HEADER, Candidate, Form, Piece
from syntax.attributes import constructor_attributes
from syntax.summaries import Outline
from syntax.symbols.model import CLASS_KINDS, FileSymbols, Symbol


def _owner_types(table: FileSymbols, owner: str) -> list[Symbol]:
    return [s for s in table.symbols if s.name == owner and s.kind in CLASS_KINDS and s.kind != "impl"]


def enclosing_class_symbols(table: FileSymbols, line: int, enclosing: Symbol | None) -> list[Symbol]:
    """Class-like symbols the cursor belongs to, outermost first (an impl and its struct, ...)."""
    found: list[Symbol] = []
    syntactic = table.enclosing_class(line)
    if syntactic is not None:
        found.append(syntactic)
    owner = enclosing.owner if enclosing is not None else None
    if owner is None and syntactic is not None and syntactic.kind == "impl":
        owner = next((s.owner for s in table.children(syntactic) if s.owner), None) or syntactic.name
    if owner:
        for s in _owner_types(table, owner):
            if s not in found:
                found.insert(0, s)
    return found


def class_header_candidates(outline: Outline, line: int, enclosing: Symbol | None, *,
                            attributes: bool) -> list[Candidate]:
    """``attributes``: a Python constructor's summary keeps the attributes it sets (syntax/attributes.py)."""
    table, parsed = outline.table, outline.parsed
    classes = enclosing_class_symbols(table, line, enclosing)
    out: list[Candidate] = []
    rank = 0.0
    for cls in classes:
        rank += 1
        contains_cursor = cls.contains_line(line)
        if contains_cursor:
            # The head the cursor is inside of, rendered open: its members follow.
            last = outline.headers[cls.index][1]
            head = outline.heads[cls.index]
            assert head is not None  # (class-like)
            out.append(Candidate(
                kind=cls.kind, name=cls.qualname, start_line=cls.start_line, end_line=last,
                tier=TIER_CLASS_HEADER, rank=rank, reason=f"{cls.kind} enclosing the cursor: declaration head",
                forms=[Form("summary", [Piece(cls.start_line, last, head)])], key=f"head:{cls.index}",
            ))
        else:
            # Go/Rust/C++: the type declared elsewhere; its fields are its body, keep it whole if possible.
            out.append(symbol_candidate(outline, cls, tier=TIER_CLASS_HEADER, rank=rank,
                                        reason=f"type of the enclosing {enclosing.kind if enclosing else 'code'}"))
    owners = {c.name for c in classes if c.kind not in ("impl",)} | {
        enclosing.owner for enclosing in [enclosing] if enclosing is not None and enclosing.owner}
    members = [s for s in table.symbols if s.owner in owners or any(s.parent == c.index for c in classes)]
    fields = [s for s in members if s.kind == "field" and not s.contains_line(line)]
    if fields:
        rank += 1
        pieces = [Piece(f.start_line, f.end_line, parsed.lines_text(f.start_line, f.end_line), verbatim=True)
                  for f in fields]
        cheap = [Piece(f.start_line, f.end_line, outline.summaries[f.index]) for f in fields]
        forms = [Form("whole", pieces)]
        if [p.text for p in cheap] != [p.text for p in pieces]:
            forms.append(Form("summary", cheap))
        out.append(Candidate(
            kind="fields", name=f"{classes[-1].qualname if classes else enclosing.owner} fields ({len(fields)})",
            start_line=fields[0].start_line, end_line=fields[-1].end_line, tier=TIER_CLASS_HEADER, rank=rank,
            reason="field declarations of the enclosing class", forms=forms, key="fields",
        ))
    ctors = [s for s in members if s.kind == "constructor"]
    if not ctors:
        # Go and Rust convention: NewT / new_t free functions.
        names = {f"New{o}" for o in owners if o} | {f"new{o}" for o in owners if o}
        ctors = [s for s in table.symbols if s.kind == "function" and s.name in names]
    for ctor in ctors:
        if enclosing is not None and ctor.index == enclosing.index:
            continue
        rank += 1
        candidate = symbol_candidate(outline, ctor, tier=TIER_CLASS_HEADER, rank=rank,
                                     reason="constructor of the enclosing class")
        text = constructor_attributes(parsed, ctor) if attributes else None
        if text is not None:
            at = 1 if candidate.forms[0].name == "whole" else 0
            candidate.forms.insert(at, Form("summary", [Piece(ctor.start_line, ctor.end_line, text)],
                                            note="with the attributes it sets"))
        out.append(candidate)
    return out
