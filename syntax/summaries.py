"""Structured summaries of blocks, derived from the syntax tree alone (no model call).

A summary keeps what a completion model needs to *call* or *use* a block: decorators or
attributes, the signature with parameter and return types, the first docstring / doc-comment
line, and an explicit elision mark for the body (``...`` in Python, ``/* … */`` elsewhere), in
the file's own syntax and indentation so the excerpt reads like the file.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ctxpress_core.languages import LINE_COMMENT
from syntax.parsed_file import ParsedFile
from syntax.symbols.model import CLASS_KINDS, FileSymbols, Symbol

BRACE_ELISION = "/* … */"
PY_ELISION = "..."

# How a doc line is written back above a brace-language summary.
_DOC_PREFIX: dict[str, tuple[str, str]] = {
    "javascript": ("/** ", " */"),
    "typescript": ("/** ", " */"),
    "tsx": ("/** ", " */"),
    "java": ("/** ", " */"),
    "rust": ("/// ", ""),
    "go": ("// ", ""),
    "c": ("// ", ""),
    "cpp": ("// ", ""),
}

# A constant's value is kept when it is this short; longer values are elided (names matter, not data).
MAX_CONSTANT_VALUE_CHARS = 48
# Body-less declarations (fields, prototypes, type aliases) up to this size are kept verbatim.
MAX_VERBATIM_DECL_CHARS = 160


def _indent_of(parsed: ParsedFile, byte: int) -> str:
    line = parsed.line_of(byte)
    start = parsed.line_byte(line)
    prefix = parsed.source[start:byte].decode("utf-8", "replace")
    return prefix[: len(prefix) - len(prefix.lstrip())]


def _start_with_indent(parsed: ParsedFile, byte: int) -> int:
    """Back up to the start of the line when only indentation precedes ``byte`` (keeps the file's
    indentation); a declaration sharing its line with other code starts at itself."""
    line_start = parsed.line_byte(parsed.line_of(byte))
    if parsed.source[line_start:byte].strip() == b"":
        return line_start
    return byte


def _brace_header_end(parsed: ParsedFile, sym: Symbol) -> int:
    """Byte where the body's opening brace is (Go ``struct {``/``interface {`` bodies start earlier)."""
    assert sym.body_start_byte is not None
    body_start = sym.body_start_byte
    if parsed.source[body_start : body_start + 1] != b"{":
        brace = parsed.source.find(b"{", body_start, sym.body_end_byte)
        if brace != -1:
            return brace
    return body_start


def header_text(parsed: ParsedFile, sym: Symbol) -> str:
    """Decorators/attributes and signature, from the start of the declaration line up to the body
    (Python: through the ``:``; brace languages: without the ``{``). Indentation is preserved."""
    start = _start_with_indent(parsed, sym.decl_start_byte)
    if sym.body_start_byte is None:
        return parsed.text(start, sym.end_byte).rstrip()
    end = sym.body_start_byte if parsed.language == "python" else _brace_header_end(parsed, sym)
    return parsed.text(start, end).rstrip()


def header_line_range(parsed: ParsedFile, sym: Symbol) -> tuple[int, int]:
    """Lines holding the signature (decorators included), used when only the head of a huge block
    fits: in Python the body starts on a later line, in brace languages on the signature's last line."""
    first = parsed.line_of(sym.decl_start_byte)
    if sym.body_start_byte is None:
        return first, sym.end_line
    if parsed.language == "python":
        body_line = parsed.line_of(sym.body_start_byte)
        return first, max(first, body_line - 1 if body_line > first else first)
    return first, parsed.line_of(_brace_header_end(parsed, sym))


def _doc_lines(parsed: ParsedFile, sym: Symbol, indent: str) -> list[str]:
    if not sym.doc:
        return []
    doc = sym.doc.replace("*/", "* /")
    if parsed.language == "python":
        return []  # placed inside the body, see summarize
    open_, close = _DOC_PREFIX.get(parsed.language, ("// ", ""))
    return [f"{indent}{open_}{doc}{close}"]


def summarize(parsed: ParsedFile, sym: Symbol, *, open_container: bool = False) -> str:
    """The structured summary of one block, ending with a newline.

    ``open_container`` renders a class-like block as its head only (signature, docstring,
    and the opening brace) so that member excerpts can follow it, as in the file.
    """
    if sym.kind == "import" or sym.kind == "package":
        return reduce_import(parsed, sym)
    if sym.kind in ("constant", "variable"):
        return reduce_constant(parsed, sym)
    if sym.body_start_byte is None:
        return _bodyless(parsed, sym)
    head = header_text(parsed, sym)
    if parsed.language == "python":
        lines, body_indent = python_head_lines(parsed, sym, head)
        if not open_container:
            lines.append(f"{body_indent}{PY_ELISION}")
        return "\n".join(lines) + "\n"
    indent = _indent_of(parsed, sym.decl_start_byte)
    lines = _doc_lines(parsed, sym, indent)
    if open_container:
        lines.append(f"{head} {{")
    else:
        # Whatever follows the body in the declaration (C's "} name;", "};") is kept.
        tail = parsed.text(sym.body_end_byte or sym.end_byte, sym.end_byte).strip()
        if len(tail) >= 80 or "\n" in tail:
            tail = ""
        elif tail and tail[0] not in ";,":
            tail = " " + tail
        lines.append(f"{head} {{ {BRACE_ELISION} }}{tail}")
    return "\n".join(lines) + "\n"


def python_head_lines(parsed: ParsedFile, sym: Symbol, head: str) -> tuple[list[str], str]:
    """A Python block's summary down to where its body goes: ``head`` (the signature), then the docstring's line;
    and the indentation of the body."""
    assert sym.body_start_byte is not None
    indent = _indent_of(parsed, sym.decl_start_byte)
    body_indent = _indent_of(parsed, sym.body_start_byte)
    if not body_indent or len(body_indent) <= len(indent):
        body_indent = indent + "    "
    lines = [head]
    if sym.doc:
        lines.append(f'{body_indent}"""{sym.doc.replace(chr(34) * 3, "")}"""')
    return lines, body_indent


def _bodyless(parsed: ParsedFile, sym: Symbol) -> str:
    text = header_text(parsed, sym)
    if len(text) <= MAX_VERBATIM_DECL_CHARS and text.count("\n") < 3:
        return text + "\n"
    first = text.splitlines()[0]
    elision = PY_ELISION if parsed.language == "python" else BRACE_ELISION
    return f"{first} {elision}\n"


def reduce_import(parsed: ParsedFile, sym: Symbol) -> str:
    """An import reduced to one line of names and aliases (multi-line import lists are joined)."""
    start = _start_with_indent(parsed, sym.decl_start_byte)
    return _reduce_import_text(parsed.language, parsed.text(start, sym.end_byte))


@functools.lru_cache(maxsize=8192)  # the same import lines are reduced on every request in a file
def _reduce_import_text(language: str, text: str) -> str:
    indent = text[: len(text) - len(text.lstrip())]
    if language == "go" and "(" in text:
        return text.rstrip() + "\n"  # a Go import block is already one name per line
    # every whitespace run to one space first: the patterns below then never scan a long run from each
    # of its characters (quadratic on an import padded with whitespace)
    flat = re.sub(r"\s+", " ", re.sub(r"\\\n", " ", text.strip()))
    flat = re.sub(r"\(\s+", "(", flat)
    flat = re.sub(r",?\s+\)", ")", flat)
    flat = re.sub(r"\{\s+", "{ ", flat)
    flat = re.sub(r",?\s+\}", " }", flat)
    return f"{indent}{flat}\n"


def reduce_constant(parsed: ParsedFile, sym: Symbol) -> str:
    """A module constant as its name (and type), with the value kept only when it is short."""
    start = _start_with_indent(parsed, sym.decl_start_byte)
    text = parsed.text(start, sym.end_byte).rstrip()
    if "\n" not in text and len(text) <= MAX_CONSTANT_VALUE_CHARS + len(sym.name) + 16:
        return text + "\n"
    eq = _assignment_split(text)
    if eq is None:
        return text.splitlines()[0] + ("\n" if parsed.language == "python" else f" {BRACE_ELISION}\n")
    lhs = text[:eq].rstrip()
    if parsed.language == "python":
        return f"{lhs} = {PY_ELISION}\n"
    terminator = ";" if text.endswith(";") else ""
    return f"{lhs} = {BRACE_ELISION}{terminator}\n"


def _assignment_split(text: str) -> int | None:
    # The first "=" that is not part of "==", "<=", ">=", "!=", "=>" or ":=" (nor the text's first or last character).
    m = _ASSIGNMENT.search(text)
    return m.start() if m else None


_ASSIGNMENT = re.compile(r"(?<=[^=<>!:])=(?=[^=>])")


# A numbered marker as elision_marker writes it, in any language's line comment: a model that copies the prompt's
# layout can write one into its completion.
NUMBERED_ELISION = re.compile(r"^\s*\S{1,2}\s?\.\.\. \(lines? \d+(-\d+)? elided\)\s*$")


def elision_marker(language: str, start_line: int, end_line: int, indent: str = "") -> str:
    """A comment line telling the model that lines were left out (1-based, inclusive)."""
    comment = LINE_COMMENT.get(language, "#")
    if start_line == end_line:
        return f"{indent}{comment} ... (line {start_line + 1} elided)\n"
    return f"{indent}{comment} ... (lines {start_line + 1}-{end_line + 1} elided)\n"


@dataclass
class Outline:
    """Every declaration of one file version as an excerpt may show it, worked out once for that version: the
    lines of its signature, its summary and, for a class-like or container block, its head alone (its members
    may follow it). Lists by symbol index: the context sources read them rather than summarise again."""

    table: FileSymbols
    headers: list[tuple[int, int]]  # header_line_range
    summaries: list[str]  # summarize
    heads: list[str | None]  # summarize(open_container=True); None: not class-like

    @property
    def parsed(self) -> ParsedFile:
        return self.table.parsed


_OUTLINE_KEY = "outline"


def outline_of(table: FileSymbols) -> Outline:
    """The outline of ``table``'s file version (remembered with the version)."""
    parsed = table.parsed
    hit = parsed.derived.get(_OUTLINE_KEY)
    if isinstance(hit, Outline) and hit.table is table:
        return hit
    syms = table.symbols
    outline = Outline(
        table,
        headers=[header_line_range(parsed, s) for s in syms],
        summaries=[summarize(parsed, s) for s in syms],
        heads=[summarize(parsed, s, open_container=True) if s.is_container or s.kind in CLASS_KINDS else None
               for s in syms])
    parsed.derived[_OUTLINE_KEY] = outline
    return outline

