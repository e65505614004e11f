"""Token counts of short texts remembered across requests (``memoized``): while the user types inside one
function, the same signatures and imports are counted on every keystroke."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

TokenCounter = Callable[[str], int]


class MemoCounter:
    """Remembers token counts of short texts across requests: while the user types inside one
    function, the same signatures and imports are counted on every keystroke."""

    def __init__(self, count_tokens: TokenCounter, max_entries: int = 200_000, max_chars: int = 4_000,
                 max_total_chars: int = 32 * 1024 * 1024) -> None:
        self._count = count_tokens
        self._memo: OrderedDict[str, int] = OrderedDict()
        self._max_entries = max_entries
        self._max_chars = max_chars
        # Texts of up to max_chars each: the entry count alone would let the memo grow to gigabytes while
        # editors type through many files (each keystroke's enclosing block is a new text).
        self._max_total_chars = max_total_chars
        self.chars = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._memo)

    def __call__(self, text: str) -> int:
        if len(text) > self._max_chars:
            return self._count(text)
        with self._lock:
            hit = self._memo.get(text)
            if hit is not None:
                self._memo.move_to_end(text)  # least recently used goes first, not oldest
        if hit is not None:
            return hit
        n = self._count(text)
        with self._lock:
            if text not in self._memo:
                self.chars += len(text)
            self._memo[text] = n
            while len(self._memo) > self._max_entries or self.chars > self._max_total_chars:
                old, _ = self._memo.popitem(last=False)
                self.chars -= len(old)
        return n


_memo_counters: dict[int, tuple[TokenCounter, MemoCounter]] = {}


def memoized(count_tokens: TokenCounter) -> TokenCounter:
    """The process-wide memo wrapper for one counting function (kept alive with it)."""
    if isinstance(count_tokens, MemoCounter):
        return count_tokens
    entry = _memo_counters.get(id(count_tokens))
    if entry is None or entry[0] is not count_tokens:
        if len(_memo_counters) > 64:
            _memo_counters.clear()
        entry = (count_tokens, MemoCounter(count_tokens))
        _memo_counters[id(count_tokens)] = entry
    return entry[1]


def memo_counters() -> list[MemoCounter]:
    """The process's memos of ``memoized`` (for the worker's cache metrics)."""
    return [memo for _, memo in list(_memo_counters.values())]
