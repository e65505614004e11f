from __future__ import annotations

from ctxpress.lsp.forward_cache import ForwardCache, Shown
from ctxpress.lsp.suggestion import without_following_lines


def test_typing_the_start_of_a_suggestion_serves_the_rest() -> None:
    cache = ForwardCache()
    cache.remember("u", Shown("c1", "def f(", ")\n", "x, y):\n    return x"))
    hit = cache.lookup("u", "def f(x, ", ")\n")
    assert hit is not None and hit.rest == "y):\n    return x" and hit.completion_id == "c1"
    assert cache.lookup("u", "def f(", ")\n").rest == "x, y):\n    return x"  # type: ignore[union-attr]


def test_anything_else_misses() -> None:
    cache = ForwardCache()
    cache.remember("u", Shown("c1", "def f(", ")\n", "x, y)"))
    assert cache.lookup("u", "def f(z", ")\n") is None  # typed something else
    assert cache.lookup("u", "def f(x", "]\n") is None  # the text after the cursor changed
    assert cache.lookup("u", "def f", ")\n") is None  # deleted before the shown position
    assert cache.lookup("u", "def f(x, y)", ")\n") is None  # typed it all: nothing left to show
    assert cache.lookup("other", "def f(x", ")\n") is None


def test_lines_that_follow_the_cursor_are_not_repeated() -> None:
    after = "\n    return total\n}\n"
    assert without_following_lines("x + 1\n    return total", after) == "x + 1"
    assert without_following_lines("x + 1\n    return total\n}", after) == "x + 1"
    assert without_following_lines("x + 1\n    return other", after) == "x + 1\n    return other"
    assert without_following_lines("x + 1\n\n", "\n") == "x + 1"
    assert without_following_lines("only one line", after) == "only one line"
