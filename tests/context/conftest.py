"""Token counter for the context tests.

The deterministic stand-in by default; set CTXPRESS_TOKENIZER_GGUF to a GGUF model file to run
the same tests with that model's own tokenizer (llama-cpp-python, vocabulary only).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from context.packing.tokens import rough_token_count
from syntax.warm import warm_up


@pytest.fixture(scope="session", autouse=True)
def _warm() -> None:
    warm_up()  # grammars and queries load once, not inside a timed assembly


@pytest.fixture(scope="session")
def count_tokens() -> Callable[[str], int]:
    gguf = os.environ.get("CTXPRESS_TOKENIZER_GGUF")
    if not gguf:
        return rough_token_count
    llama_cpp = pytest.importorskip("llama_cpp")
    model = llama_cpp.Llama(model_path=gguf, vocab_only=True, verbose=False)

    def count(text: str) -> int:
        return len(model.tokenize(text.encode("utf-8"), add_bos=False, special=False)) if text else 0

    return count
