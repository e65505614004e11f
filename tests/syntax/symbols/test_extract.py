"""Blocks per language: what the extractor and each language's classifier read from a tree."""

from __future__ import annotations

import pytest

from syntax.parsed_file import parse_text
from syntax.symbols.table import extract_symbols

CASES: dict[str, tuple[str, set[tuple[str, str]]]] = {
    "python": (
        "import os\nfrom a import (b,\n    c as d)\nLIMIT = 3\n\n@dec\ndef f(x: int) -> int:\n    return x\n\n"
        "class K(Base):\n    n: int = 0\n    def __init__(self):\n        self.n = 1\n    def m(self):\n        pass\n",
        {("import", "os"), ("constant", "LIMIT"), ("function", "f"), ("class", "K"), ("field", "K.n"),
         ("constructor", "K.__init__"), ("method", "K.m")},
    ),
    "javascript": (
        "import fs from 'fs';\nconst MAX = 3;\nexport function f(a) { return a; }\nconst g = (x) => x;\n"
        "class K { n = 1; constructor() { this.n = 2; } m() {} }\n",
        {("import", "fs"), ("constant", "MAX"), ("function", "f"), ("function", "g"), ("class", "K"),
         ("field", "K.n"), ("constructor", "K.constructor"), ("method", "K.m")},
    ),
    "typescript": (
        "import { a } from './a';\nexport interface I { x: number }\ntype T = string;\nenum E { A }\n"
        "export class K { private n: number = 1; constructor(n: number) { this.n = n; }\n"
        "  get(): number { return 1; } }\n",
        {("import", "./a"), ("interface", "I"), ("type", "T"), ("enum", "E"), ("class", "K"), ("field", "K.n"),
         ("constructor", "K.constructor"), ("method", "K.get")},
    ),
    "go": (
        "package p\n\nimport \"fmt\"\n\nconst Max = 1\n\ntype S struct { A int }\n\n"
        "func NewS() *S { return &S{} }\n\nfunc (s *S) Do(x int) error { fmt.Println(x); return nil }\n",
        {("package", "p"), ("import", "imports"), ("constant", "Max"), ("struct", "S"), ("function", "NewS"),
         ("method", "S.Do")},
    ),
    "java": (
        "package a;\nimport java.util.List;\npublic class K {\n  private int n;\n  public K(int n) { this.n = n; }\n"
        "  public int get() { return n; }\n  enum E { A; void f() {} }\n}\n",
        {("package", "a"), ("import", "java.util.List"), ("class", "K"), ("field", "K.n"), ("constructor", "K.K"),
         ("method", "K.get"), ("enum", "K.E"), ("method", "E.f")},
    ),
    "rust": (
        "use std::fmt;\nconst N: u32 = 1;\npub struct S { a: u32 }\nimpl S {\n    pub fn new() -> Self { S { a: 0 } }\n"
        "    fn get(&self) -> u32 { self.a }\n}\nfn free() {}\n",
        {("import", "std::fmt"), ("constant", "N"), ("struct", "S"), ("impl", "S"), ("constructor", "S.new"),
         ("method", "S.get"), ("function", "free")},
    ),
    "c": (
        "#include <stdio.h>\n#define N 3\nstruct p { int x; };\nint proto(int a);\nstatic const int K = 1;\n"
        "int f(int a) { return a; }\n",
        {("import", "<stdio.h>"), ("constant", "N"), ("struct", "p"), ("function", "proto"), ("constant", "K"),
         ("function", "f")},
    ),
    "cpp": (
        "#include <vector>\nnamespace n {\nclass K {\n public:\n  K() {}\n  int get() const { return v_; }\n"
        " private:\n  int v_;\n};\nint K2::other() { return 1; }\n}\n",
        {("import", "<vector>"), ("namespace", "n"), ("class", "K"), ("constructor", "K.K"), ("method", "K.get"),
         ("field", "K.v_"), ("method", "K2.other")},
    ),
}


@pytest.mark.parametrize("language", sorted(CASES))
def test_blocks_are_extracted(language: str) -> None:
    text, expected = CASES[language]
    table = extract_symbols(parse_text(text, language))
    found = {(s.kind, s.qualname) for s in table.symbols}
    assert expected <= found, expected - found


def test_line_ranges_include_decorators_and_doc_comments() -> None:
    text = "// Adds.\n// Really.\nfunc add(a, b int) int {\n\treturn a + b\n}\n"
    table = extract_symbols(parse_text("package p\n" + text, "go"))
    add = next(s for s in table.symbols if s.name == "add")
    assert (add.start_line, add.end_line) == (1, 5)
    assert add.doc == "Adds."
    py = extract_symbols(parse_text("@a\n@b\ndef f():\n    '''Doc line.\n\n    More.'''\n", "python"))
    f = py.symbols[0]
    assert (f.start_line, f.end_line, f.doc) == (0, 5, "Doc line.")


def test_enclosing_function_is_the_named_block_not_a_closure() -> None:
    text = "def outer():\n    def inner():\n        return 1\n    return inner\n"
    table = extract_symbols(parse_text(text, "python"))
    assert table.enclosing_function(2).name == "outer"  # type: ignore[union-attr]


def test_function_with_an_empty_body_being_typed() -> None:
    # The body was blanked out (the developer is typing it): no docstring, no crash.
    from syntax.parsed_file import parse_text
    from syntax.symbols.table import extract_symbols

    table = extract_symbols(parse_text("def distance(a, b):\n\ndef other():\n    return 1\n", "python", "x.py"))
    assert [s.name for s in table.symbols if s.kind == "function"] == ["distance", "other"]
