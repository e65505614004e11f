"""Which languages have a grammar, by path (and a header's contents)."""

from __future__ import annotations

import pytest

from syntax.grammars import detect_language, is_supported


@pytest.mark.parametrize(
    ("path", "language"),
    [("a.py", "python"), ("a.js", "javascript"), ("a.jsx", "javascript"), ("a.ts", "typescript"),
     ("a.tsx", "tsx"), ("a.go", "go"), ("A.java", "java"), ("a.rs", "rust"), ("a.c", "c"),
     ("a.cc", "cpp"), ("a.hpp", "cpp"), ("a.rb", None), ("Makefile", None)],
)
def test_detect_language(path: str, language: str | None) -> None:
    assert detect_language(path) == language


def test_header_is_cpp_only_with_cpp_constructs() -> None:
    assert detect_language("x.h", "struct a { int b; };\n") == "c"
    assert detect_language("x.h", "namespace n { class A {}; }\n") == "cpp"
    assert not is_supported(detect_language("x.rb"))
