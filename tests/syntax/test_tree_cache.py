"""The incremental per-file tree cache: cache hits, incremental and halfway parses, edits of the opened version."""

from __future__ import annotations

import pytest

from syntax.grammars import get_parser
from syntax.parsed_file import parse_text
from syntax.symbols.extract import Extractor
from syntax.symbols.table import cheap_symbols, extract_symbols
from syntax.tree_cache import TreeCache

SOURCE = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(300))


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
                   for a, b in zip(table.symbols, Extractor(parsed).run(), strict=True))
    assert cache.from_base == 2  # (the first cursor's predecessor is the opened version itself)
    # typed on at the last cursor: from the latest version, as before
    again = "".join([*lines[:13], "    return x + 1\n", *lines[14:]])
    cache.get("m.py", again, "python", blank_line=13)
    assert cache.from_base == 2


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
