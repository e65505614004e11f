"""The context library: the prompt of one completion request, from the file's text and the cursor to the
fill-in-the-middle prompt the engine is sent. ``ContextLibrary.build_prompt`` (context/build.py) is its entry point; the
sources of context are in ``context/sources/``, the token accounting and packing into a budget in
``context/packing/``. The completion worker calls ``build_prompt``, ``ctxpress explain`` the in-file context
(``context.assembly``); the library imports neither."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for the type checker; at run time ``__getattr__`` below loads them
    from context.build import ContextLibrary, FileView, Prompt
    from context.packing.tokens import exact_counter, file_tokens, memo_sizes, memoized
    from context.prepare import Prepared, request_features
    from context.prompt import cache_key
    from context.sources.retrieval import Retriever
    from context.sources.window import MAX_LINE_CHARS, longest_line
    from context.warm import warm_file

# What the workers use, and all they may import (the import-linter contract in pyproject.toml).
__all__ = [
    "MAX_LINE_CHARS", "ContextLibrary", "FileView", "Prepared", "Prompt", "Retriever", "cache_key", "exact_counter",
    "file_tokens", "longest_line", "memo_sizes", "memoized", "request_features", "warm_file",
]

# Each name's module. Loaded on first use, so that importing one small module of the library (ctxpress explain, the
# benchmarks) does not load all of it (retrieval's gRPC and database clients: about a second).
_PUBLIC = {
    "ContextLibrary": "context.build", "FileView": "context.build", "Prompt": "context.build",
    "exact_counter": "context.packing.tokens", "file_tokens": "context.packing.tokens",
    "memo_sizes": "context.packing.tokens", "memoized": "context.packing.tokens",
    "Prepared": "context.prepare", "request_features": "context.prepare",
    "cache_key": "context.prompt",
    "Retriever": "context.sources.retrieval",
    "MAX_LINE_CHARS": "context.sources.window", "longest_line": "context.sources.window",
    "warm_file": "context.warm",
}


def __getattr__(name: str) -> Any:
    home = _PUBLIC.get(name)
    if home is None:
        raise AttributeError(f"module 'context' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
