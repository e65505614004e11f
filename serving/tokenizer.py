"""The model's own tokenizer, for counting budgets in the workers.

Loaded from the GGUF file with ``vocab_only`` (no weights, ~0.2 s), so a worker counts
exactly the tokens the engine will see without holding the model in memory.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from pathlib import Path


class Tokenizer:
    def __init__(self, gguf_path: Path) -> None:
        from llama_cpp import Llama

        self.path = gguf_path
        self._vocab = Llama(model_path=str(gguf_path), vocab_only=True, verbose=False)
        self._lock = threading.Lock()  # the llama.cpp vocab is not documented as thread-safe

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        with self._lock:
            # special=False: the worker counts file text, never its own FIM markers, and matching
            # special-token strings in text is quadratic in llama.cpp (a file of "<|fim_prefix|>"...)
            return self._vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def close(self) -> None:
        """Free the vocabulary now (left to interpreter shutdown, llama.cpp's bindings may be gone already)."""
        self._vocab.close()


def memoized_counter(count: Callable[[str], int], max_chars: int = 4096,
                     entries: int = 20_000) -> Callable[[str], int]:
    """Lines and blocks repeat from one keystroke to the next: count each small text once.
    Large texts (whole files, whole prompts) change every keystroke and are not kept."""
    cached = functools.lru_cache(maxsize=entries)(count)

    def counter(text: str) -> int:
        return cached(text) if len(text) <= max_chars else count(text)

    return counter
