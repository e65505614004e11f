"""Model-written notes: a one-line description of a block whose structured summary says little.

A structured summary (syntax/summaries.py) is a signature and the first line of a docstring. For a block with
no docstring and an opaque name (``f``, ``cb``, ``process``, ``run``) it tells the model nothing it can use, so
the indexer marks such blocks, the completion worker asks the model for one line about each while the engine
is idle, and a summary shows that line where the docstring would be (feature ``model_notes``).

A note is keyed by the block's own text, so a note written for one version of a block is never shown
beside another.
"""

from __future__ import annotations

import hashlib
import re

from syntax.parsed_file import ParsedFile
from syntax.symbols.model import CLASS_KINDS, FUNCTION_KINDS, Symbol

# Names that say what kind of thing a block is but not what it does.
GENERIC_WORDS: frozenset[str] = frozenset({
    "action", "apply", "body", "call", "callback", "cb", "closure", "deco", "decorator", "do", "doit", "exec",
    "execute", "fn", "fun", "func", "go", "handle", "handler", "helper", "impl", "inner", "main", "obj", "op",
    "perform", "proc", "process", "run", "runner", "stuff", "thing", "tmp", "temp", "util", "visit", "work",
    "wrap", "wrapped", "wrapper",
})
# A body this short is shown whole when it is shown at all: a note would not add to it.
MIN_BODY_LINES = 3
# What the model is shown of a block (its start: the signature and the first statements say the most).
MAX_SOURCE_CHARS = 3000
MAX_NOTE_CHARS = 120

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def opaque_name(name: str) -> bool:
    """A name that does not say what its block does: two letters or fewer, or generic words only. Dunder
    methods are named by the language's protocols, not opaque."""
    if name.startswith("__") and name.endswith("__") and len(name) > 4:
        return False
    core = name.strip("_$")
    if len(re.sub(r"[^A-Za-z]", "", core)) <= 2:
        return True
    words = [w.lower() for w in _WORDS.findall(core)]
    return bool(words) and all(w in GENERIC_WORDS or w.isdigit() for w in words)


def wants_note(parsed: ParsedFile, sym: Symbol) -> bool:
    """Whether ``sym``'s structured summary says too little: a function or class-like block whose body runs to a
    few lines (a stub's ``...`` or a one-line body is all there is to show), with no docstring, whose name is
    opaque."""
    if sym.body_start_byte is None or not (sym.kind in FUNCTION_KINDS or sym.kind in CLASS_KINDS) or sym.doc:
        return False
    return sym.end_line - parsed.line_of(sym.body_start_byte) + 1 >= MIN_BODY_LINES and opaque_name(sym.name)


def note_key(parsed: ParsedFile, sym: Symbol) -> str:
    """The key of ``sym``'s note: a hash of its declaration's text (decorators included), so that an edit
    anywhere in the block, or a move that changes its indentation, asks for a new note."""
    return hashlib.sha256(parsed.source[sym.decl_start_byte:sym.end_byte]).hexdigest()[:32]


def note_source(parsed: ParsedFile, sym: Symbol) -> str:
    """What the model reads to write the note: the block's lines, cut to ``MAX_SOURCE_CHARS``."""
    return parsed.lines_text(sym.start_line, sym.end_line)[:MAX_SOURCE_CHARS]


def clean_note(text: str) -> str | None:
    """The model's answer as a note: its first line, without comment or quote marks around it, at most
    ``MAX_NOTE_CHARS`` (cut at a word); None when nothing usable is left."""
    line = next((x.strip() for x in text.splitlines() if x.strip()), "")
    line = re.sub(r"^(?:#+|//+|/\*+|\*+|-+|>+)\s*", "", line)
    line = line.strip().strip("`\"'").replace('"""', "").replace("*/", "").strip()
    line = re.sub(r"\s+", " ", line)
    if len(line) > MAX_NOTE_CHARS:
        line = line[:MAX_NOTE_CHARS].rsplit(" ", 1)[0].rstrip(",;:") + " …"
    if len(line) < 8 or not re.search(r"[A-Za-z]{3}", line):
        return None
    return line
