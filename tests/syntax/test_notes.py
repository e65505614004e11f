"""Which blocks want a model-written note, how a note is keyed and cleaned, and where a summary shows it."""

from __future__ import annotations

import pytest

from syntax.notes import clean_note, note_key, opaque_name, wants_note
from syntax.parsed_file import parse_text
from syntax.summaries import outline_of, with_notes
from syntax.symbols.table import extract_symbols

PY = '''\
import os


def f(a, b):
    total = 0
    for x in a:
        total += x * b
    return total


def load_config(path):
    text = open(path).read()
    lines = text.splitlines()
    return dict(line.split("=") for line in lines)


def run(items):
    """Run every item."""
    for item in items:
        item()
    return len(items)


def cb(x):
    return x
'''

JS = '''\
function h(xs) {
  let n = 0;
  for (const x of xs) {
    n += x;
  }
  return n;
}
'''


def _table(text: str, language: str):  # type: ignore[no-untyped-def]
    return extract_symbols(parse_text(text, language, f"m.{'py' if language == 'python' else 'js'}"))


@pytest.mark.parametrize(("name", "opaque"), [
    ("f", True), ("cb", True), ("_g2", True), ("process", True), ("run_wrapper", True), ("doIt", False),
    ("handleCallback", True), ("load_config", False), ("parseHeader", False), ("__init__", False),
    ("get_user", False), ("max", False),
])
def test_an_opaque_name_says_what_kind_of_thing_not_what_it_does(name: str, opaque: bool) -> None:
    assert opaque_name(name) is opaque


def test_only_long_enough_undocumented_blocks_with_opaque_names_want_a_note() -> None:
    table = _table(PY, "python")
    wanted = {s.name for s in table.symbols if wants_note(table.parsed, s)}
    # load_config: its name says it; run: its docstring says it; cb: two lines, shown whole anyway
    assert wanted == {"f"}


def test_a_note_is_keyed_by_its_block_text_and_moves_with_it_unchanged() -> None:
    table = _table(PY, "python")
    f = next(s for s in table.symbols if s.name == "f")
    moved = _table("# a comment above\n\n" + PY, "python")
    f_moved = next(s for s in moved.symbols if s.name == "f")
    edited = _table(PY.replace("total += x * b", "total += x * b + 1"), "python")
    f_edited = next(s for s in edited.symbols if s.name == "f")
    assert note_key(table.parsed, f) == note_key(moved.parsed, f_moved)
    assert note_key(table.parsed, f) != note_key(edited.parsed, f_edited)


@pytest.mark.parametrize(("answer", "note"), [
    ("Sums the items of a, each multiplied by b.\n", "Sums the items of a, each multiplied by b."),
    ('"""Sums the products of a\'s items and b."""', "Sums the products of a's items and b."),
    ("# Returns the weighted total.\nMore text.", "Returns the weighted total."),
    ("\n\n`Computes a scaled sum of a list`", "Computes a scaled sum of a list"),
    ("ok", None),
    ("", None),
    ("x" * 40 + " " + "word " * 40, ("x" * 40 + " " + "word " * 40)[:120].rsplit(" ", 1)[0] + " …"),
])
def test_the_answer_becomes_one_clean_line(answer: str, note: str | None) -> None:
    assert clean_note(answer) == note


def test_a_python_summary_shows_the_note_where_the_docstring_goes() -> None:
    table = _table(PY, "python")
    f = next(s for s in table.symbols if s.name == "f")
    outline = outline_of(table)
    notes = {note_key(table.parsed, f): "Sums a's items, each times b."}
    noted = with_notes(outline, notes)
    assert noted.summaries[f.index] == 'def f(a, b):\n    """Sums a\'s items, each times b."""\n    ...\n'
    assert outline.summaries[f.index] == "def f(a, b):\n    ...\n"  # the plain outline is untouched
    assert [s for i, s in enumerate(noted.summaries) if i != f.index] == \
        [s for i, s in enumerate(outline.summaries) if i != f.index]
    assert with_notes(outline, notes) is noted  # remembered with the file version and the notes


def test_a_note_whose_block_changed_is_not_shown() -> None:
    table = _table(PY, "python")
    f = next(s for s in table.symbols if s.name == "f")
    notes = {note_key(table.parsed, f): "Sums a's items, each times b."}
    edited = _table(PY.replace("total += x * b", "total -= x * b"), "python")
    f_edited = next(s for s in edited.symbols if s.name == "f")
    assert "Sums" not in with_notes(outline_of(edited), notes).summaries[f_edited.index]


def test_a_brace_language_summary_shows_the_note_as_a_doc_comment() -> None:
    table = _table(JS, "javascript")
    h = next(s for s in table.symbols if s.name == "h")
    assert wants_note(table.parsed, h)
    noted = with_notes(outline_of(table), {note_key(table.parsed, h): "Adds up the numbers in xs. */ evil"})
    assert noted.summaries[h.index].splitlines()[0] == "/** Adds up the numbers in xs. * / evil */"


def test_a_stub_with_a_long_signature_wants_no_note() -> None:
    stub = "@overload\ndef op(\n    self,\n    operator: str,\n    precedence: int = 0,\n) -> Any:\n    ...\n"
    table = _table(stub, "python")
    (op,) = [s for s in table.symbols if s.name == "op"]
    assert not wants_note(table.parsed, op)
