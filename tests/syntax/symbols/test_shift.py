"""Symbol tables shifted past an edit inside one function equal a fresh extraction."""

from __future__ import annotations

import dataclasses

from syntax.symbols.extract import Extractor
from syntax.symbols.table import cheap_symbols, extract_symbols
from syntax.tree_cache import TreeCache
from tests.syntax.symbols.store_sample import SOURCE, fields


def test_an_edit_inside_a_body_shifts_the_table() -> None:
    cache = TreeCache()
    extract_symbols(cache.get("s.py", SOURCE, "python"))
    edited = SOURCE.replace("        return value\n", "        log(value)\n        return value\n")
    parsed = cache.get("s.py", edited, "python")
    table = cheap_symbols(parsed)
    assert table is not None and table.shifted
    assert fields(table.symbols) == fields(Extractor(parsed).run())


def test_a_provisional_table_is_not_carried_past_an_edit_in_another_function() -> None:
    cache = TreeCache()
    extract_symbols(cache.get("s.py", SOURCE, "python"))
    broken_text = SOURCE.replace("        return value\n", "    if value\n        return value\n")
    assert cheap_symbols(cache.get("s.py", broken_text, "python")).provisional  # type: ignore[union-attr]
    # still broken in put, and now an edit in helper: nothing says what the tree means there
    elsewhere = broken_text.replace("    return x * 2", "    return x * 3")
    assert cheap_symbols(cache.get("s.py", elsewhere, "python")) is None


def test_typing_a_docstrings_doc_line_changes_only_that_doc() -> None:
    cache = TreeCache()
    extract_symbols(cache.get("s.py", SOURCE, "python"))
    parsed = cache.get("s.py", SOURCE.replace('"""Store one value."""', '"""Store a value, or two."""'), "python")
    table = cheap_symbols(parsed)
    assert table is not None and table.shifted
    assert next(s for s in table.symbols if s.name == "put").doc == "Store a value, or two."
    assert fields(table.symbols) == fields(Extractor(parsed).run())


def test_an_edit_inside_a_parameter_list_shifts_the_table() -> None:
    source = SOURCE.replace("def put(self, key, value):",
                            "def put(\n        self,\n        key,\n        value,\n    ):")
    cache = TreeCache()
    extract_symbols(cache.get("s.py", source, "python"))
    edited = source.replace("        key,\n", "        key: str,\n        default=None,\n")
    parsed = cache.get("s.py", edited, "python")
    table = cheap_symbols(parsed)
    assert table is not None and table.shifted and not table.provisional
    assert fields(table.symbols) == fields(Extractor(parsed).run())


def test_a_tree_broken_by_typing_keeps_the_last_sound_table_until_it_is_whole() -> None:
    cache = TreeCache()
    sound = extract_symbols(cache.get("s.py", SOURCE, "python"))
    # Half-typed at class level, inside put's lines: error recovery reaches past the function.
    broken_text = SOURCE.replace("        return value\n", "    if value\n        return value\n")
    broken = cache.get("s.py", broken_text, "python")
    assert broken.tree.root_node.has_error
    kept = cheap_symbols(broken)
    assert kept is not None and kept.provisional
    assert [s.name for s in kept.symbols] == [s.name for s in sound.symbols]
    put = next(s for s in kept.symbols if s.name == "put")
    assert put.end_line == next(s for s in sound.symbols if s.name == "put").end_line + 1
    # Whole again, and the typing made a new method (dedented into the class): rebuilt.
    whole_text = SOURCE.replace("        return value\n",
                                "        return value\n\n    def size(self):\n        return 0\n")
    whole = cache.get("s.py", whole_text, "python")
    assert not whole.tree.root_node.has_error
    assert cheap_symbols(whole) is None
    assert "size" in [s.name for s in extract_symbols(whole).symbols]


def test_an_edit_below_the_doc_line_of_a_docstring_shifts() -> None:
    source = SOURCE.replace('"""Store one value."""', '"""Store one value.\n\n        Details follow.\n        """')
    cache = TreeCache()
    extract_symbols(cache.get("s.py", source, "python"))
    edited = source.replace("Details follow.", "Details follow, and more of them.")
    parsed = cache.get("s.py", edited, "python")
    table = cheap_symbols(parsed)
    assert table is not None and table.shifted
    assert fields(table.symbols) == fields(Extractor(parsed).run())


def test_the_cursor_line_blanked_keeps_the_table_equal_to_a_fresh_one() -> None:
    cache = TreeCache()
    extract_symbols(cache.get("s.py", SOURCE, "python"))
    lines = SOURCE.splitlines(keepends=True)
    for line, typed in ((8, "        self.items[ke"), (9, "        return val"), (12, "        return self.it")):
        edited = "".join([*lines[:line], typed + "\n", *lines[line + 1:]])
        parsed = cache.get("s.py", edited, "python", blank_line=line)
        table = cheap_symbols(parsed) or extract_symbols(parsed)
        # Equal but for where a block ending on the blanked line ends within it (the shifted table
        # keeps the whole line, a fresh tree ends after the placeholder).
        fresh = Extractor(parsed).run()
        assert [dataclasses.replace(s, end_byte=0, body_end_byte=0) for s in table.symbols] == [
            dataclasses.replace(s, end_byte=0, body_end_byte=0) for s in fresh]
        assert all(a.end_byte == b.end_byte or a.end_line == line for a, b in zip(table.symbols, fresh, strict=True))
        assert table.symbols[[s.name for s in table.symbols].index("put" if line < 11 else "get")].end_line >= line
