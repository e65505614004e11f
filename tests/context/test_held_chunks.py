"""Cross-file chunks while the user types in one block: kept, like the in-file excerpts before them."""

from __future__ import annotations

from context.chunks import CrossFileChunks
from context.prepare import Prepared
from context.session import FileSessions
from context.sources.retrieval import Retrieval, RetrievalReport, RetrievedChunk
from ctxpress_core.features import resolve
from ctxpress_core.wire.v1 import BlockReport, CompletionRequest, ContextReport

EXCERPTS = "import os\n\ndef helper(x):\n    ...\n"


def _chunk(symbol: str) -> RetrievedChunk:
    return RetrievedChunk(repository="r", path="other.py", symbol=symbol, kind="function", language="python",
                          start_line=0, end_line=1, signature=f"def {symbol}(x): ...",
                          content=f"def {symbol}(x):\n    return x\n", score=0.9, similarity=0.8,
                          found_by=["vector"], file_reasons=["repository"])


def _prepared(block: str, steady: bool, budget: int = 1024, block_start: int = 10) -> Prepared:
    report = ContextReport(strategy="ast", sources=["method"], file_tokens=0, context_tokens=100,
                           budget_tokens=budget, blocks=[BlockReport(kind="function", name="f", start_line=block_start,
                                                                     end_line=block_start + 3, form="whole", tokens=20,
                                                                     reason="encloses the cursor")])
    return Prepared(EXCERPTS + block, "\n", report, "python", "0" * 64, resolve(None), stable_chars=len(EXCERPTS),
                    steady=steady)


def _chunks() -> CrossFileChunks:
    return CrossFileChunks(count_tokens=lambda s: max(1, len(s) // 4), sessions=FileSessions())


REQUEST = CompletionRequest(repository="r", path="m.py", text="x", line=0, column=0, mode="optimized")


def test_chunks_stay_while_typing_in_the_same_block_and_change_elsewhere() -> None:
    chunks = _chunks()
    first = _prepared("def f(x):\n    y = ", steady=False)
    chunks.add(first, Retrieval([_chunk("alpha")], RetrievalReport()), REQUEST, None)
    assert "def alpha" in first.prefix and first.prefix.startswith(EXCERPTS)
    # the next keystroke: the excerpts were kept, a fresh query found another chunk
    typed = _prepared("def f(x):\n    y = he", steady=True)
    chunks.add(typed, Retrieval([_chunk("beta")], RetrievalReport()), REQUEST, None)
    assert "def alpha" in typed.prefix and "def beta" not in typed.prefix
    assert typed.prefix[:len(first.prefix) - len("y = ")] == first.prefix[:len(first.prefix) - len("y = ")]
    assert any("kept while typing" in b.reason for b in typed.report.blocks if b.kind == "retrieved")
    # excerpts chosen afresh (another block, or an edit elsewhere): so are the chunks
    moved = _prepared("def g(x):\n    ", steady=False, block_start=40)
    chunks.add(moved, Retrieval([_chunk("gamma")], RetrievalReport()), REQUEST, None)
    assert "def gamma" in moved.prefix and "def alpha" not in moved.prefix


def test_kept_chunks_that_no_longer_fit_are_chosen_afresh() -> None:
    chunks = _chunks()
    chunks.add(_prepared("def f(x):\n    ", steady=False), Retrieval([_chunk("alpha")], RetrievalReport()), REQUEST,
               None)
    tight = _prepared("def f(x):\n    y", steady=True, budget=104)  # 4 tokens of room left
    chunks.add(tight, Retrieval([], RetrievalReport()), REQUEST, None)
    assert "def alpha" not in tight.prefix and tight.report.context_tokens == 100


def test_chunks_are_held_per_repository_and_counted() -> None:
    chunks = _chunks()
    chunks.add(_prepared("def f(x):\n    ", steady=False), Retrieval([_chunk("alpha")], RetrievalReport()), REQUEST,
               None)
    # the same path in another repository, typed in the same block: its own chunks, not the first one's
    fork = _prepared("def f(x):\n    y", steady=True)
    chunks.add(fork, Retrieval([_chunk("beta")], RetrievalReport()), REQUEST.model_copy(update={"repository": "fork"}),
               None)
    assert "def beta" in fork.prefix and "def alpha" not in fork.prefix
    entries = chunks.sessions.counts()
    assert entries["held_chunk_files"] == entries["file_sessions"] == 2
