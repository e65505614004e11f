"""Language detection and the incremental per-file tree cache."""

from __future__ import annotations

import pytest

from indexer.parsing import (
    PARSE_CHUNK_BYTES,
    TreeCache,
    detect_language,
    get_parser,
    is_supported,
    parse_source,
    parse_text,
)
from indexer.symbols import _Extractor, cheap_symbols, extract_symbols

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


def test_typing_on_the_blanked_line_keeps_tree_and_symbols() -> None:
    cache = TreeCache()
    base = SOURCE.replace("    return x + 7\n", "    return x + 7\n    y = 1\n")
    line = base.splitlines().index("    y = 1")
    first = cache.get("m.py", base, "python", blank_line=line)
    table = extract_symbols(first)
    second = cache.get("m.py", base.replace("    y = 1\n", "    y = 2\n"), "python", blank_line=line)
    assert second.tree is first.tree and second.source != first.source
    shifted = cheap_symbols(second)
    assert shifted is not None and shifted.symbols == table.symbols


def test_two_separate_edits_parse_as_two_small_ones() -> None:
    cache = TreeCache()
    opened = cache.get("m.py", SOURCE, "python")
    extract_symbols(opened)
    lines = SOURCE.splitlines(keepends=True)
    # the line typed in before (near the top) and the one typed in now (near the bottom)
    lines[4] = "    return x + 1000\n"
    lines[850] = "    return 0\n"
    edited = "".join(lines)
    before = cache.incremental_parses
    parsed = cache.get("m.py", edited, "python")
    assert cache.incremental_parses - before == 2  # through the version with only the first edit
    assert str(parsed.tree.root_node) == str(parse_text(edited, "python").tree.root_node)
    shifted = cheap_symbols(parsed)
    assert shifted is not None and shifted.shifted
    assert shifted.symbols == extract_symbols(parse_text(edited, "python")).symbols


def test_a_new_cursor_in_a_file_unchanged_since_it_was_opened_is_one_edit_of_the_opened_version() -> None:
    cache = TreeCache()
    opened = cache.get("m.py", SOURCE, "python")  # as it is: the base
    extract_symbols(opened)
    lines = SOURCE.splitlines(keepends=True)
    for line in (4, 850, 13):  # three cursors far apart, the line typed on each time
        typed = "".join([*lines[:line], "    return x +\n", *lines[line + 1:]])
        before = cache.incremental_parses
        parsed = cache.get("m.py", typed, "python", blank_line=line)
        assert cache.incremental_parses - before == 1  # not two: the last cursor's line back, this one blanked
        assert str(parsed.tree.root_node) == str(parse_text(parsed.parsed_bytes.decode(), "python").tree.root_node)
        table = cheap_symbols(parsed)  # shifted from the opened version's table, as a fresh one
        assert table is not None and [s.name for s in table.symbols] == [f"f{i}" for i in range(300)]
        assert all((a.start_line, a.end_line, a.body_start_byte) == (b.start_line, b.end_line, b.body_start_byte)
                   for a, b in zip(table.symbols, _Extractor(parsed).run(), strict=True))
    assert cache.from_base == 2  # (the first cursor's predecessor is the opened version itself)
    # typed on at the last cursor: from the latest version, as before
    again = "".join([*lines[:13], "    return x + 1\n", *lines[14:]])
    cache.get("m.py", again, "python", blank_line=13)
    assert cache.from_base == 2


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


def test_a_new_line_of_a_block_typed_since_opening_is_one_edit_of_the_opened_version() -> None:
    lines = SOURCE.splitlines(keepends=True)
    opened = "".join([*lines[:301], *lines[302:]])  # f100's body removed; typed back below
    cache = TreeCache()
    extract_symbols(cache.get("m.py", opened, "python"))
    typed: list[str] = []
    for n, line in enumerate(['    """Add a hundred.\n', "\n", "    More.\n", '    """\n', "    return x + 100\n"]):
        typed.append(line)
        text = "".join([*lines[:301], *typed, *lines[302:]])
        before = cache.from_base
        parsed = cache.get("m.py", text, "python", blank_line=301 + n)
        # the typed lines are one edit of the opened version (the first request's predecessor is it)
        assert cache.from_base == before + (n > 0)
        assert str(parsed.tree.root_node) == str(parse_text(parsed.parsed_bytes.decode(), "python").tree.root_node)
        table = cheap_symbols(parsed) or extract_symbols(parsed)
        assert [s.name for s in table.symbols] == [f"f{i}" for i in range(300)]


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


def _node_spans(tree) -> list[tuple[str, int, int, tuple[int, int], tuple[int, int]]]:  # type: ignore[no-untyped-def]
    out, stack = [], [tree.root_node]
    while stack:
        node = stack.pop()
        out.append((node.type, node.start_byte, node.end_byte, tuple(node.start_point), tuple(node.end_point)))
        stack.extend(node.children)
    return sorted(out)


JS_SOURCE = "".join(
    f"export function handler{i}(request, response) {{\n  const body = request.body ?? {{}};\n"
    f"  if (body.count > {i}) {{\n    response.send(body.items.slice(0, {i}));\n  }}\n  return body;\n}}\n\n"
    for i in range(40)
)


@pytest.mark.parametrize(("path", "language", "source"),
                         [("m.py", "python", SOURCE), ("h.js", "javascript", JS_SOURCE)])
def test_typing_that_only_widens_the_blanked_line_shifts_the_tree_without_a_parse(
    path: str, language: str, source: str,
) -> None:
    # The line is typed again character by character; the blanked version of most keystrokes
    # only grows a run of spaces, and then the tree is edited, not re-parsed. It must be the
    # tree a fresh parse of the same blanked text gives, node for node.
    lines = source.splitlines(keepends=True)
    line = next(i for i, text in enumerate(lines) if text.strip().startswith(("return x + 1", "response.send")))
    body = lines[line].rstrip("\n")
    indent = len(body) - len(body.lstrip())
    cache = TreeCache()
    cache.get(path, source, language, blank_line=line)
    for n in range(len(body) - indent + 1):
        text = "".join(lines[:line]) + body[:indent + n] + "\n" + "".join(lines[line + 1:])
        parsed = cache.get(path, text, language, blank_line=line)
        fresh = TreeCache().get(path, text, language, blank_line=line)
        assert _node_spans(parsed.tree) == _node_spans(fresh.tree), body[:indent + n]
        assert extract_symbols(parsed).symbols == extract_symbols(fresh).symbols
    shifted, parsed_again = cache.shifted_without_parse, cache.incremental_parses
    assert shifted >= (len(body) - indent) // 2, (shifted, parsed_again)


def test_a_large_source_parsed_in_chunks_gives_the_tree_of_a_whole_parse() -> None:
    # multi-byte characters everywhere, so chunk edges fall inside them
    line = "s_{i} = 'héllo wörld 🙂 ✓' * {i}  # ünïcode\n"
    text = "".join(line.format(i=i) for i in range(PARSE_CHUNK_BYTES // 10))
    source = text.encode("utf-8")
    assert len(source) > 3 * PARSE_CHUNK_BYTES
    chunked = parse_source("python", source)
    whole = get_parser("python").parse(source)
    assert not chunked.root_node.has_error and str(chunked.root_node) == str(whole.root_node)
    edited = source.replace(b"s_7 =", b"s_7x =", 1)
    tree = chunked.copy()
    tree.edit(start_byte=source.index(b"s_7 =") + 3, old_end_byte=source.index(b"s_7 =") + 3,
              new_end_byte=source.index(b"s_7 =") + 4, start_point=(7, 3), old_end_point=(7, 3), new_end_point=(7, 4))
    assert str(parse_source("python", edited, old_tree=tree).root_node) == str(
        get_parser("python").parse(edited).root_node)


async def test_parsing_a_large_file_on_a_thread_leaves_the_event_loop_running() -> None:
    import asyncio
    import time

    source = "".join(f"def f{i}(x):\n    return [x + {i} for _ in range(3)]\n\n" for i in range(20_000)).encode()
    ticks: list[float] = []
    span: list[float] = []
    done = False

    def parse() -> object:
        span.append(time.perf_counter())
        tree = parse_source("python", source)
        span.append(time.perf_counter())
        return tree

    async def ticker() -> None:
        while not done:
            await asyncio.sleep(0)
            ticks.append(time.perf_counter())

    task = asyncio.create_task(ticker())
    parsed = await asyncio.get_running_loop().run_in_executor(None, parse)
    done = True
    await task
    assert not parsed.root_node.has_error  # type: ignore[attr-defined]
    # the loop kept running while the file was parsed: one parse holding the GIL throughout lets
    # it run a few hundred times (measured: 330-450), the chunked parse twenty thousand
    during = [t for t in ticks if span[0] < t < span[1]]
    assert len(during) > 3000, len(during)
