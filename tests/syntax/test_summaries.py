"""Structured summaries keep signatures, types, decorators and the first doc line; bodies go."""

from __future__ import annotations

import pytest

from ctxpress_core.languages import LINE_COMMENT
from syntax.parsed_file import parse_text
from syntax.summaries import (
    NUMBERED_ELISION,
    elision_marker,
    header_line_range,
    outline_of,
    reduce_constant,
    reduce_import,
    summarize,
)
from syntax.symbols.table import extract_symbols

CASES = {
    "python": ("@cache\ndef area(w: float, h: float = 1.0) -> float:\n    \"\"\"Area of a box.\n\n    More.\"\"\"\n"
               "    secret = w * h\n    return secret\n",
               "@cache\ndef area(w: float, h: float = 1.0) -> float:\n    \"\"\"Area of a box.\"\"\"\n    ...\n"),
    "typescript": ("/** Area of a box. */\nexport function area(w: number, h = 1): number {\n  const secret = w * h;\n"
                   "  return secret;\n}\n",
                   "/** Area of a box. */\nexport function area(w: number, h = 1): number { /* … */ }\n"),
    "go": ("package p\n\n// Area of a box.\nfunc Area(w, h float64) (float64, error) {\n\tsecret := w * h\n"
           "\treturn secret, nil\n}\n",
           "// Area of a box.\nfunc Area(w, h float64) (float64, error) { /* … */ }\n"),
    "java": ("class A {\n  /** Area of a box. */\n  @Override\n  public double area(double w) throws E {\n"
             "    double secret = w;\n    return secret;\n  }\n}\n",
             "  /** Area of a box. */\n  @Override\n  public double area(double w) throws E { /* … */ }\n"),
    "rust": ("/// Area of a box.\n#[inline]\npub fn area(w: f64, h: f64) -> f64 {\n    let secret = w * h;\n"
             "    secret\n}\n",
             "/// Area of a box.\n#[inline]\npub fn area(w: f64, h: f64) -> f64 { /* … */ }\n"),
    "c": ("/* Area of a box. */\ndouble area(double w, double h) {\n    double secret = w * h;\n"
          "    return secret;\n}\n",
          "// Area of a box.\ndouble area(double w, double h) { /* … */ }\n"),
    "cpp": ("template <typename T>\nT area(T w, T h) {\n  T secret = w * h;\n  return secret;\n}\n",
            "template <typename T>\nT area(T w, T h) { /* … */ }\n"),
    "javascript": ("async function area(w, h = 1) {\n  const secret = w * h;\n  return secret;\n}\n",
                   "async function area(w, h = 1) { /* … */ }\n"),
}


@pytest.mark.parametrize("language", sorted(CASES))
def test_summary_keeps_signature_drops_body(language: str) -> None:
    text, expected = CASES[language]
    parsed = parse_text(text, language)
    sym = next(s for s in extract_symbols(parsed).symbols if s.name.lower() == "area")
    summary = summarize(parsed, sym)
    assert summary == expected
    assert "secret" not in summary


def test_class_summary_open_and_closed() -> None:
    parsed = parse_text("class K(Base):\n    \"\"\"A thing.\"\"\"\n    def m(self):\n        pass\n", "python")
    k = extract_symbols(parsed).symbols[0]
    assert summarize(parsed, k) == 'class K(Base):\n    """A thing."""\n    ...\n'
    assert summarize(parsed, k, open_container=True) == 'class K(Base):\n    """A thing."""\n'


def test_imports_reduced_to_names_and_constants_to_short_values() -> None:
    parsed = parse_text("from a.b import (\n    c,\n    d as e,\n)\nLIMIT = 10\nTABLE = {\n    'a': 1,\n"
                        "    'b': 2,\n}\n", "python")
    syms = extract_symbols(parsed).symbols
    assert reduce_import(parsed, syms[0]) == "from a.b import (c, d as e)\n"
    assert reduce_constant(parsed, syms[1]) == "LIMIT = 10\n"
    assert reduce_constant(parsed, syms[2]) == "TABLE = ...\n"


def test_the_outline_holds_each_declarations_forms_once_per_version() -> None:
    """What the context sources read instead of summarising: the same texts as asked one at a time, worked
    out once for a table, and again for another version's."""
    text = ('import os\nLIMIT = 10\n\nclass K(Base):\n    """A thing."""\n    size: int = 0\n\n'
            '    def grow(self, by: int) -> None:\n        self.size += by\n')
    parsed = parse_text(text, "python")
    table = extract_symbols(parsed)
    outline = outline_of(table)
    assert [s.kind for s in table.symbols][:3] == ["import", "constant", "class"]
    assert outline.summaries == [summarize(parsed, s) for s in table.symbols]
    assert outline.headers == [header_line_range(parsed, s) for s in table.symbols]
    klass = table.symbols[2]
    assert outline.heads[klass.index] == 'class K(Base):\n    """A thing."""\n'
    assert [h is None for h in outline.heads] == [not (s.is_container or s.kind == "class") for s in table.symbols]
    assert outline_of(table) is outline
    other = parse_text(text.replace("grow", "shrink"), "python")
    assert outline_of(extract_symbols(other)).summaries[-1].startswith("    def shrink(")


def test_the_numbered_elision_pattern_matches_every_languages_marker() -> None:
    for language in LINE_COMMENT:
        for start, end in ((3, 3), (3, 9)):
            marker = elision_marker(language, start, end, indent="    ")
            assert NUMBERED_ELISION.match(marker.rstrip("\n")), marker
    assert not NUMBERED_ELISION.match("# ... (see the lines above)")
