"""Where the FIM middle starts: the prompt layouts that keep the KV of what comes before typing."""

from __future__ import annotations

from context.prepare import Prepared
from context.prompt import middle_from
from ctxpress_core.features import resolve
from ctxpress_core.wire.v1 import CompletionRequest, ContextReport

EXCERPTS = "import os\n\ndef helper(x):\n    ...\n"
BLOCK = "def f(x):\n    y = helper(x)\n    return y.fo"


def _prepared(features: dict[str, bool], strategy: str = "ast", retrieved: str = "") -> Prepared:
    report = ContextReport(strategy=strategy, sources=[], file_tokens=0, context_tokens=0)
    prefix = EXCERPTS + retrieved + BLOCK
    return Prepared(prefix, "\n", report, "python", "0" * 64, resolve(features), stable_chars=len(EXCERPTS),
                    block_chars=0 if strategy == "window-fallback" else len(BLOCK))


def _request(mode: str = "optimized") -> CompletionRequest:
    return CompletionRequest(repository="r", path="m.py", text="x", line=0, column=0, mode=mode)  # type: ignore[arg-type]


def test_the_middle_opens_at_the_block_or_the_cursor_line_and_only_when_asked() -> None:
    assert middle_from(_request(), _prepared({})) is None  # plain PSM by default
    line = middle_from(_request(), _prepared({"line_in_middle": True}))
    assert line is not None and (EXCERPTS + BLOCK)[line:] == "    return y.fo"
    # cross-file chunks go in before the block, which stays the prefix's tail
    prepared = _prepared({"block_in_middle": True}, retrieved="# other.py\ndef g(): ...\n")
    block = middle_from(_request(), prepared)
    assert block is not None and prepared.prefix[block:] == BLOCK
    # a window (no block): its cursor line; baseline mode: never
    fallback = _prepared({"block_in_middle": True}, strategy="window-fallback")
    assert fallback.prefix[middle_from(_request(), fallback) or 0:] == "    return y.fo"
    assert middle_from(_request("baseline"), _prepared({"block_in_middle": True})) is None
