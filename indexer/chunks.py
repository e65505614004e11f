"""One chunk per function, method and class of a file, cut with the shared tree-sitter symbol table.

A function or method chunk is its whole source (decorators and doc comment included); a class
chunk is the class's *summary* (header, docstring and one line per member), because its methods
are chunks of their own. Every chunk carries what retrieval needs: path, language, symbol, kind,
line range, signature summary, a content hash, and the identifier words for the lexical index.
The file itself contributes its imports and the module keys other files import it by, which
give the coarse, file-level filter its import graph.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from ctxpress_core.errors import CtxpressError
from syntax.parsed_file import ParsedFile, parse_text
from syntax.summaries import summarize
from syntax.symbols.model import CLASS_KINDS, FUNCTION_KINDS, FileSymbols, Symbol
from syntax.symbols.table import extract_symbols
from syntax.wide_errors import has_wide_error

# A body beyond this many characters is cut in the stored content (the embedding sees the first
# ~128 tokens anyway; the context packer takes summaries of large blocks).
MAX_CHUNK_CHARS = 24_000
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
# Words every file of a language has: they would match everything lexically.
STOP_WORDS = frozenset(
    "self cls this def return if else elif for while in is not and or none true false null nil new let const var "
    "function class import from as pass break continue try except finally raise throw catch public private "
    "protected static void int str bool float string func package struct type interface fn pub mut impl use "
    "auto char long short unsigned signed double include define typedef enum switch case default do with yield "
    "await async lambda go defer chan map range err ok nullptr".split()
)


class ChunkingError(CtxpressError, ValueError):
    """The file cannot be cut into blocks (the reason is the message)."""


@dataclass(frozen=True)
class Chunk:
    path: str
    language: str
    symbol: str  # qualified: Class.method
    kind: str
    start_line: int  # 0-based, inclusive
    end_line: int
    signature: str  # the structured summary (signature, docstring line, elided body)
    content: str  # whole source for functions/methods; the summary for classes
    content_hash: str
    name_lexemes: str  # words of the symbol's own name
    lexemes: str  # words of the identifiers it uses

    @property
    def key(self) -> tuple[str, str]:
        return (self.symbol, self.content_hash)

    def embedding_text(self) -> str:
        # What the vector is made from: where it lives, what it is called, its signature and doc, then
        # the body (the tokenizer keeps the first 128 tokens).
        body = self.content if self.kind not in CLASS_KINDS else ""
        return f"{self.path}\n{self.kind} {self.symbol}\n{self.signature.strip()}\n{body}"[:4000]


@dataclass
class FileChunks:
    path: str
    language: str
    content_hash: str
    chunks: list[Chunk] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)  # import targets, '/'-separated module paths
    module_keys: list[str] = field(default_factory=list)  # how other files may import this one


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def identifier_words(text: str) -> list[str]:
    """Lower-cased words of the identifiers in ``text``: ``parseHTTPHeader`` gives parse, http,
    header and parsehttpheader; ``read_config`` gives read, config and readconfig."""
    out: dict[str, None] = {}
    for ident in _IDENT.findall(text):
        if len(ident) < 2 or ident.lower() in STOP_WORDS:
            continue
        joined = ident.replace("_", "").lower()
        if joined and not joined.isdigit():
            out[joined] = None
        for part in ident.split("_"):
            for word in _CAMEL.findall(part):
                w = word.lower()
                if len(w) > 1 and not w.isdigit() and w not in STOP_WORDS:
                    out[w] = None
    return list(out)


def first_error_line(parsed: ParsedFile) -> int | None:
    stack = [parsed.tree.root_node]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            return node.start_point.row
        if node.has_error:
            stack.extend(reversed(node.children))
    return None


# ---------------------------------------------------------------------------------------------
# Import graph keys: everything is normalised to '/'-separated module paths without extension,
# and matched by suffix (a file's keys are all suffixes of its module path), so `import a.b` finds
# `src/a/b.py` and `#include "x/y.h"` finds `include/x/y.h`.

_PY_FROM = re.compile(r"^\s*from\s+(\.*)([\w.]*)\s+import\s+(.+)$", re.S)
_PY_IMPORT = re.compile(r"^\s*import\s+(.+)$", re.S)
_QUOTED = re.compile(r"""["'`]([^"'`\s]+)["'`]""")
_JAVA = re.compile(r"import\s+(?:static\s+)?([\w.]+)")
_RUST = re.compile(r"use\s+([\w:]+)")
_C_INCLUDE = re.compile(r"#\s*include\s*[<\"]([^>\"]+)[>\"]")
_EXTENSION = re.compile(r"\.(py|pyi|js|mjs|cjs|jsx|ts|mts|cts|tsx|go|java|rs|c|h|cc|cpp|cxx|hpp|hh|hxx)$")


def _norm(module_path: str) -> str:
    parts: list[str] = []
    for part in module_path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/".join(parts)


def module_keys(path: str, language: str) -> list[str]:
    p = PurePosixPath(path)
    stem = _EXTENSION.sub("", path)
    bases = {stem}
    if language == "python" and p.stem == "__init__":
        bases = {str(p.parent)}
    elif language in ("javascript", "typescript", "tsx") and p.stem == "index":
        bases.add(str(p.parent))
    elif language in ("go", "java", "rust"):
        bases.add(str(p.parent))  # a Go/Java package is its folder; Rust `use a::b` may name a module folder
        if language == "rust" and p.stem in ("mod", "lib", "main"):
            bases = {str(p.parent)}
    keys: set[str] = set()
    for base in bases:
        parts = [x for x in base.split("/") if x and x != "."]
        for i in range(len(parts)):
            keys.add("/".join(parts[i:]))
    return sorted(keys)


def import_targets(path: str, language: str, import_texts: list[str]) -> list[str]:
    folder = str(PurePosixPath(path).parent)
    targets: set[str] = set()
    for text in import_texts:
        if language == "python":
            m = _PY_FROM.match(text)
            if m:
                dots, module, names = m.group(1), m.group(2), m.group(3)
                base = module.replace(".", "/")
                if dots:  # relative: one dot is this package
                    up = "/".join([".."] * (len(dots) - 1))
                    base = _norm(f"{folder}/{up}/{base}")
                if base:
                    targets.add(base)
                for item in names.strip().strip("()").split(","):
                    name = item.strip().split(" as ")[0].strip()
                    if name.isidentifier():
                        targets.add(_norm(f"{base}/{name}"))
                continue
            m = _PY_IMPORT.match(text)
            if m:
                for item in m.group(1).split(","):
                    module = item.strip().split(" as ")[0].strip()
                    if module:
                        targets.add(module.replace(".", "/"))
        elif language in ("javascript", "typescript", "tsx", "go"):
            for spec in _QUOTED.findall(text):
                if spec.startswith("."):
                    targets.add(_norm(f"{folder}/{_EXTENSION.sub('', spec)}"))
                else:
                    targets.add(_norm(_EXTENSION.sub("", spec)))
        elif language == "java":
            targets.update(m.replace(".", "/") for m in _JAVA.findall(text))
        elif language == "rust":
            for m in _RUST.findall(text):
                parts = [p for p in m.split("::") if p not in ("crate", "self", "super", "")]
                if parts:
                    targets.add("/".join(parts))
        elif language in ("c", "cpp"):
            for inc in _C_INCLUDE.findall(text):
                stem = _EXTENSION.sub("", inc)
                targets.add(_norm(stem))
                targets.add(_norm(f"{folder}/{stem}"))
    return sorted(t for t in targets if t)


# ---------------------------------------------------------------------------------------------


def _class_summary(parsed: ParsedFile, table: FileSymbols, sym: Symbol) -> str:
    parts = [summarize(parsed, sym, open_container=True)]
    for child in table.children(sym):
        if child.kind in ("import", "package"):
            continue
        parts.append(summarize(parsed, child))
    if parsed.language != "python":
        indent = parsed.text(parsed.line_byte(sym.start_line), sym.decl_start_byte)
        indent = indent[: len(indent) - len(indent.lstrip())] if not indent.strip() else ""
        parts.append(f"{indent}}}\n")
    return "".join(parts)


def chunk_file(path: str, text: str, language: str) -> FileChunks:
    """Cut one file; ``ChunkingError`` when it is too broken to trust its blocks."""
    parsed = parse_text(text, language, path)
    if parsed.has_error and has_wide_error(parsed):
        line = first_error_line(parsed)
        raise ChunkingError(f"syntax error{f' at line {line + 1}' if line is not None else ''}")
    table = extract_symbols(parsed)
    result = FileChunks(path=path, language=language, content_hash=sha256(text))
    imports = [s for s in table.symbols if s.kind in ("import", "package")]
    result.imports = import_targets(path, language, [parsed.text(s.start_byte, s.end_byte) for s in imports])
    result.module_keys = module_keys(path, language)
    seen: set[tuple[str, str]] = set()
    for sym in table.symbols:
        if sym.kind in FUNCTION_KINDS and sym.body_start_byte is not None:
            content = parsed.lines_text(sym.start_line, sym.end_line)[:MAX_CHUNK_CHARS]
            signature = summarize(parsed, sym)
        elif sym.kind in CLASS_KINDS:
            content = _class_summary(parsed, table, sym)
            signature = summarize(parsed, sym)
        else:
            continue
        name = sym.qualname if sym.kind not in CLASS_KINDS or not sym.owner else sym.name
        chunk = Chunk(
            path=path, language=language, symbol=name, kind=sym.kind, start_line=sym.start_line,
            end_line=sym.end_line, signature=signature, content=content, content_hash=sha256(content),
            name_lexemes=" ".join(identifier_words(name)), lexemes=" ".join(identifier_words(content)),
        )
        if chunk.key in seen:  # e.g. two identical overloads: one chunk
            continue
        seen.add(chunk.key)
        result.chunks.append(chunk)
    return result
