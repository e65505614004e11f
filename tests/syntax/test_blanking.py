"""The cursor line blanked: the tree a file being typed in is parsed as (through the tree cache)."""

from __future__ import annotations

from syntax.parsed_file import parse_text
from syntax.symbols.table import extract_symbols
from syntax.tree_cache import TreeCache

SOURCE = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(300))


def test_blanking_the_cursor_line_recovers_declarations() -> None:
    text = "def a():\n    return 1\n\ndef b():\n    x = foo(\n\ndef c():\n    return 3\n"
    assert parse_text(text, "python").tree.root_node.has_error
    parsed = TreeCache().get("m.py", text, "python", blank_line=4)
    assert parsed.source == text.encode()  # the text is the real one, only the tree is not
    assert parsed.parsed_bytes == text.replace("x = foo(", "_       ").encode()  # same offsets
    assert not parsed.tree.root_node.has_error
    symbols = extract_symbols(parsed)
    assert [s.name for s in symbols.symbols] == ["a", "b", "c"]
    assert symbols.symbols[1].end_line == 4  # the placeholder keeps b's block reaching the cursor


def test_blanked_line_parses_cleanly_in_the_middle_of_a_block() -> None:
    text = "def b():\n    x = foo(\n    return x\n"
    parsed = TreeCache().get("m.py", text, "python", blank_line=1)
    assert parsed.parsed_bytes == b"def b():\n    _       \n    return x\n"
    assert not parsed.tree.root_node.has_error
    c_text = "int f(void) {\n    g(\"open\n    return 1;\n}\n"
    c_parsed = TreeCache().get("m.c", c_text, "c", blank_line=1)
    assert c_parsed.parsed_bytes == c_text.replace('g("open', "       ").encode()
    assert not c_parsed.tree.root_node.has_error


def test_a_short_line_dedented_inside_a_block_is_blanked_not_kept() -> None:
    # "x" typed at column 0 of an empty line in a method: kept, it would end the method and
    # the class (the lines below become a stray indented block); blank, they stay in it.
    text = "class A:\n    def f(self):\n        a = 1\nx\n        return a\n\n    def g(self):\n        pass\n"
    parsed = TreeCache().get("m.py", text, "python", blank_line=3)
    assert parsed.parsed_bytes == text.replace("\nx\n", "\n \n").encode()
    assert [(s.name, s.end_line) for s in extract_symbols(parsed).symbols] == [("A", 7), ("f", 4), ("g", 7)]
    # a short header under a line indented no deeper than it is kept (it opens the block below)
    header = "def f():\n    for\n        y = 1\n"
    assert TreeCache().get("m.py", header, "python", blank_line=1).parsed_bytes == header.encode()


def test_a_line_inside_brackets_is_blanked_with_spaces() -> None:
    text = "def b():\n    x = foo(\n        1,\n        2,\n    )\n    return x\n"
    cache = TreeCache()
    cache.get("m.py", text, "python")  # opened: the tree says line 2 continues the call
    typed = text.replace("        1,\n", "        1, ba\n")
    parsed = cache.get("m.py", typed, "python", blank_line=2)
    assert parsed.parsed_bytes == typed.replace("        1, ba\n", "             \n").encode()
    assert not parsed.tree.root_node.has_error
    # without a previous version the line above decides ("(" or "," ends it)
    fresh = TreeCache().get("m.py", typed, "python", blank_line=2)
    assert fresh.parsed_bytes == parsed.parsed_bytes


def test_a_docstring_line_keeps_its_quotes() -> None:
    text = 'def a():\n    """Do a.\n\n    More.\n    """\n    return 1\n\n\ndef b():\n    """Do b."""\n    return 2\n'
    for line in (1, 4, 9):  # a docstring's first line, its closing line, a one-line docstring
        parsed = TreeCache().get("m.py", text, "python", blank_line=line)
        assert parsed.parsed_bytes == text.encode()  # blanked, the rest of the file would turn into a string
        assert [s.name for s in extract_symbols(parsed).symbols] == ["a", "b"]


def test_a_docstring_being_typed_is_closed_at_the_cursor_line() -> None:
    """A docstring typed into a function, its closing quotes not typed yet: the string would run
    to the end of the file and turn every later docstring inside out."""
    head = 'def a():\n    """Do a."""\n    return 1\n\n\ndef typed(x):\n'
    tail = '\n\ndef b():\n    """Do b."""\n    return 2\n\n\nclass C:\n    """A class."""\n'
    opening = head + '    """Return the' + tail  # the line opening it is the cursor line
    parsed = TreeCache().get("m.py", opening, "python", blank_line=6)
    assert parsed.parsed_bytes.splitlines()[6] == b"    _".ljust(len('    """Return the'))  # a statement
    assert [s.name for s in extract_symbols(parsed).symbols] == ["a", "typed", "b", "C"]
    inside = head + '    """Return the\n    sum of' + tail  # a line inside it
    parsed = TreeCache().get("m.py", inside, "python", blank_line=7)
    assert parsed.parsed_bytes.splitlines()[7] == b'"""' + b" " * 7  # closed, at the line's start
    assert not parsed.tree.root_node.has_error
    assert [s.name for s in extract_symbols(parsed).symbols] == ["a", "typed", "b", "C"]
    # a line inside a docstring that is closed further down is left as it was
    closed = head + '    """Return the\n    sum of\n    """\n    return x' + tail
    parsed = TreeCache().get("m.py", closed, "python", blank_line=7)
    assert b'"""' not in parsed.parsed_bytes.splitlines()[7]
    assert [s.name for s in extract_symbols(parsed).symbols] == ["a", "typed", "b", "C"]


def test_a_continuation_line_is_known_from_the_opened_version_after_a_jump() -> None:
    text = SOURCE + "def b():\n    return bool(\n        foo(\n            1\n        )\n        <= bar(\n" \
        "            2\n        )\n    )\n"
    line = SOURCE.count("\n") + 5  # "        <= bar(": nothing in the text above says it continues
    cache = TreeCache()
    cache.get("m.py", text, "python")
    lines = text.splitlines(keepends=True)
    near_top = "".join([*lines[:4], "    return", *lines[5:]])
    cache.get("m.py", near_top, "python", blank_line=4)  # the latest version differs above the call
    typed = text.replace("        <= bar(\n", "        <= ba\n")
    parsed = cache.get("m.py", typed, "python", blank_line=line)
    assert parsed.parsed_bytes.splitlines()[line].strip() == b""  # spaces: inside the call's brackets
    assert [s.name for s in extract_symbols(parsed).symbols] == [*(f"f{i}" for i in range(300)), "b"]


def test_a_line_closing_brackets_keeps_its_closers() -> None:
    text = "def b():\n    x = foo(\n        1,\n    ) + bar(2)\n    return x\n"
    parsed = TreeCache().get("m.py", text, "python", blank_line=3)
    assert parsed.parsed_bytes == text.replace("    ) + bar(2)\n", "    )         \n").encode()
    assert not parsed.tree.root_node.has_error
    js = "function f() {\n  g(1,\n    2);\n  if (x) {\n    y();\n  } else {\n    z();\n  }\n}\n"
    js_parsed = TreeCache().get("m.js", js, "javascript", blank_line=5)
    assert js_parsed.parsed_bytes == js.replace("  } else {\n", "  }      {\n").encode()
    assert not js_parsed.tree.root_node.has_error


def test_a_block_header_being_typed_still_opens_its_block() -> None:
    text = "def b(x):\n    if x > 1:\n        return 2\n    return 3\n"
    for typed in ("    if x > 1:\n", "    if x >\n", "    for i in rang\n"):
        edited = text.replace("    if x > 1:\n", typed)
        parsed = TreeCache().get("m.py", edited, "python", blank_line=1)
        line = parsed.parsed_bytes.splitlines()[1]
        assert line.startswith(b"    if _:") and len(line) == len(typed) - 1
        assert not parsed.tree.root_node.has_error
    # a declaration keeps its header (the symbol table needs it), so does a clause like except
    decl = TreeCache().get("m.py", text, "python", blank_line=0)
    assert decl.parsed_bytes == text.encode() and extract_symbols(decl).symbols[0].name == "b"
    handler = "def c():\n    try:\n        f()\n    except ValueError:\n        pass\n"
    kept = TreeCache().get("m.py", handler, "python", blank_line=3)
    assert kept.parsed_bytes == handler.encode() and not kept.tree.root_node.has_error
