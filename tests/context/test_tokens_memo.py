"""The token-count memo stays within its bounds, in entries and in characters."""

from __future__ import annotations

from context.packing.tokens import MemoCounter


def test_the_memo_forgets_the_least_recently_used_texts_past_its_characters() -> None:
    memo = MemoCounter(len, max_total_chars=1_000)
    for i in range(500):
        assert memo(f"{i:04d}" + "x" * 96) == 100
    assert len(memo) == 10 and memo.chars == 1_000
    assert memo("0499" + "x" * 96) == 100 and len(memo) == 10  # the latest are still there


def test_the_memo_forgets_past_its_entries() -> None:
    memo = MemoCounter(len, max_entries=3)
    for text in ("a", "bb", "ccc", "dddd"):
        memo(text)
    assert len(memo) == 3 and memo.chars == 9
