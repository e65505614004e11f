"""Language detection and the incremental per-file tree cache."""

from __future__ import annotations

import pytest

from indexer.parsing import TreeCache, detect_language, get_parser, is_supported, parse_text

SOURCE = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(300))


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


def test_cache_hit_for_same_text_and_incremental_reparse_for_an_edit() -> None:
    cache = TreeCache()
    first = cache.get("m.py", SOURCE, "python")
    assert cache.get("m.py", SOURCE, "python") is first and cache.hits == 1
    edited = SOURCE.replace("return x + 150\n", "return x * 150 + 1\n")
    second = cache.get("m.py", edited, "python")
    assert second.incremental and cache.incremental_parses == 1
    fresh = get_parser("python").parse(edited.encode())
    assert str(second.tree.root_node) == str(fresh.root_node)
    # The previous version's tree is untouched (the cache edits a copy).
    assert str(first.tree.root_node) == str(get_parser("python").parse(SOURCE.encode()).root_node)


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_incremental_tree_matches_a_fresh_parse(where: str) -> None:
    cache = TreeCache()
    cache.get("m.py", SOURCE, "python")
    if where == "start":
        edited = "import os\n" + SOURCE
    elif where == "end":
        edited = SOURCE + "def tail():\n    pass\n"
    else:
        edited = SOURCE.replace("def f100(x):\n", "def f100(x, y=1):\n    y += 1\n")
    parsed = cache.get("m.py", edited, "python")
    assert str(parsed.tree.root_node) == str(get_parser("python").parse(edited.encode()).root_node)


def test_apply_edit_with_explicit_range() -> None:
    cache = TreeCache()
    p = cache.get("m.py", "def a():\n    return 1\n", "python")
    start = p.source.index(b"1")
    q = cache.apply_edit("m.py", "python", start, start + 1, "42")
    assert q.source == b"def a():\n    return 42\n" and q.incremental


def test_cursor_byte_counts_characters_not_bytes() -> None:
    parsed = parse_text("s = 'héllo'\nx = 1\n", "python")
    assert parsed.cursor_byte(0, 7) == len("s = 'hé".encode())
    assert parsed.cursor_byte(1, 99) == len("s = 'héllo'\nx = 1".encode())  # clamped to the line


def test_blanking_the_cursor_line_recovers_declarations() -> None:
    text = "def a():\n    return 1\n\ndef b():\n    x = foo(\n\ndef c():\n    return 3\n"
    parsed = parse_text(text, "python")
    repaired = parsed.with_line_blanked(4)
    assert repaired.source == parsed.source
    assert not repaired.tree.root_node.has_error
