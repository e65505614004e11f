"""Exact token counts by memoised segments, and the per-line upper-bound estimates."""

from __future__ import annotations

import re

from context.packing.tokens import exact_counter, rough_token_count, segments


def test_segments_split_only_before_lines_that_hold_code() -> None:
    text = "def f():\n    x = 1\n\n  \n    return x\n}\n"
    parts = segments(text)
    assert "".join(parts) == text
    assert parts == ["def f():\n", "    x = 1\n\n  \n", "    return x\n", "}\n"]


def _pretokenizer_like(text: str) -> int:
    # newline runs (with the whitespace before them) are one token; indentation and words too
    return len(re.findall(r"[^\S\n]*\n+|[^\S\n]+(?=\S)|\w+|[^\w\s]", text))


def test_exact_counter_equals_counting_the_whole_text() -> None:
    texts = ["a = 1\n", "def f(x):\n    return x\n\n\nclass A:\n    pass\n", "  \n\n  x\n", ""]
    for count in (_pretokenizer_like, rough_token_count):
        exact = exact_counter(count)
        for text in texts:
            assert exact(text) == count(text), (count.__name__, text)
