"""Symbol tables spliced past an edit that changes them equal a fresh extraction."""

from __future__ import annotations

from syntax.symbols.extract import Extractor
from syntax.symbols.table import cheap_symbols, extract_symbols
from syntax.tree_cache import TreeCache
from tests.syntax.symbols.store_sample import SOURCE, fields


def test_edits_that_change_the_table_re_extract_the_declarations_they_touch() -> None:
    for edited, changed in (
        # a docstring removed: the doc may come from elsewhere
        (SOURCE.replace('"""Store one value."""', "pass"), lambda t: _named(t, "put").doc is None),
        (SOURCE.replace("def helper(x):", "def assist(x):"), lambda t: "assist" in _names(t)),  # a name
        (SOURCE.replace("\n\ndef helper", "\n\nLIMIT = 3\n\n\ndef helper"),  # module level
         lambda t: _names(t)[-2:] == ["LIMIT", "helper"]),
        (SOURCE.replace("    def get(self, key):", '    @cached\n    def get(self, key):\n        """Look up."""'),
         lambda t: _named(t, "get").doc == "Look up." and _named(t, "get").start_line == 11),  # a method's header
        # dedented out of the class: the class ends before it, and it is a function now
        (SOURCE.replace("    def get(self, key):\n        return", "def get(self, key):\n    return"),
         lambda t: _named(t, "get").kind == "function" and _named(t, "Store").end_line == 9),
    ):
        cache = TreeCache()
        extract_symbols(cache.get("s.py", SOURCE, "python"))
        parsed = cache.get("s.py", edited, "python")
        table = cheap_symbols(parsed)  # spliced: only the declarations around the edit read again
        assert table is not None and table.shifted
        assert fields(table.symbols) == fields(Extractor(parsed).run())
        assert changed(table.symbols)


def test_a_table_read_from_a_broken_tree_is_not_shifted_when_the_tree_mends() -> None:
    cache = TreeCache()
    broken = cache.get("s.py", SOURCE.replace("        return value\n", "    if value\n        return value\n"),
                       "python")
    assert broken.tree.root_node.has_error
    extract_symbols(broken)  # a file opened broken: the table of the broken tree
    mended = cache.get("s.py", SOURCE, "python")
    table = cheap_symbols(mended)
    assert table is not None and not table.provisional
    assert fields(table.symbols) == fields(Extractor(mended).run())


def _names(symbols):  # type: ignore[no-untyped-def]
    return [s.name for s in symbols]


def _named(symbols, name):  # type: ignore[no-untyped-def]
    return next(s for s in symbols if s.name == name)
