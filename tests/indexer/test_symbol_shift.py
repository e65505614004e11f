"""Symbol tables shifted past an edit inside one function equal a fresh extraction."""

from __future__ import annotations

import dataclasses

from indexer.parsing import TreeCache
from indexer.symbols import _Extractor, cheap_symbols, extract_symbols

SOURCE = '''import os


class Store:
    """Keeps things."""

    def put(self, key, value):
        """Store one value."""
        self.items[key] = value
        return value

    def get(self, key):
        return self.items.get(key)


def helper(x):
    return x * 2
'''


def _fields(table):  # type: ignore[no-untyped-def]
    return [dataclasses.astuple(s) for s in table]


def test_an_edit_inside_a_body_shifts_the_table() -> None:
    cache = TreeCache()
    extract_symbols(cache.get("s.py", SOURCE, "python"))
    edited = SOURCE.replace("        return value\n", "        log(value)\n        return value\n")
    parsed = cache.get("s.py", edited, "python")
    table = cheap_symbols(parsed)
    assert table is not None and table.shifted
    assert _fields(table.symbols) == _fields(_Extractor(parsed).run())


def test_edits_that_can_change_the_table_are_rebuilt() -> None:
    for edited in (
        SOURCE.replace('"""Store one value."""', '"""Store a value."""'),  # a docstring is part of a symbol
        SOURCE.replace("def helper(x):", "def helper(x, y):"),  # a signature
        SOURCE.replace("\n\ndef helper", "\n\nLIMIT = 3\n\n\ndef helper"),  # module level
    ):
        cache = TreeCache()
        extract_symbols(cache.get("s.py", SOURCE, "python"))
        parsed = cache.get("s.py", edited, "python")
        assert cheap_symbols(parsed) is None
        assert _fields(extract_symbols(parsed).symbols) == _fields(_Extractor(parsed).run())
