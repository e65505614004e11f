"""Issue 43: a file's session (steady excerpts, held cross-file chunks) is its user's own. Keyed by (repository,
path), the chunks alice's request placed (her own saved, uncommitted helper among them) went into bob's prompt and
his reply's ``context.blocks`` when he completed in the same block of the same file, and "kept while typing" told
him whether his text equalled her unsaved buffer.

At the context library's level: the library as the worker holds it, two users' views of one file. Retrieval is
given as what the index returns to each viewer (alice's saved rows are hers only: tests/workers/test_grants.py);
what is tested is what the library keeps between requests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from context.build import ContextLibrary, FileView, Prompt
from context.sources.retrieval import Retrieval, RetrievalReport, RetrievedChunk
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import CompletionRequest, content_hash

PATH = "app/service.py"
HELPERS = "".join(f"def helper_{i}(values):\n    \"\"\"Step {i}.\"\"\"\n    scaled = [v * {i} for v in values]\n"
                  f"    return sum(scaled) + {i}\n\n\n" for i in range(30))
SECRET = "alice_unsaved_helper"  # in a file alice saved and never committed


def _file(typed: str) -> tuple[str, int, int]:
    head = f"{HELPERS}def main(values):\n    total = helper_2(values)\n    return total + {typed}"
    return head + "\n\n\ndef after():\n    return None\n", head.count("\n"), len(head) - head.rfind("\n") - 1


class IndexAsSeenBy:
    """What retrieval returns to each viewer: alice's saved helper for alice, nothing for anyone else."""

    async def retrieve(self, *, viewer: str | None = None, **_: Any) -> Retrieval:
        if viewer != "alice":
            return Retrieval([], RetrievalReport())
        chunk = RetrievedChunk(repository="r", path="app/private.py", symbol=SECRET, kind="function",
                               language="python", start_line=0, end_line=1, signature=f"def {SECRET}(x): ...",
                               content=f"def {SECRET}(x):\n    return x * 42\n", score=0.9, similarity=0.8,
                               found_by=["vector"], file_reasons=["repository"])
        return Retrieval([chunk], RetrievalReport(returned=1))


def _complete(library: ContextLibrary, user: str, typed: str) -> Prompt:
    text, line, column = _file(typed)
    request = CompletionRequest(repository="r", path=PATH, text=text, line=line, column=column, mode="optimized",
                                budget_tokens=600)  # cropped: the block's excerpts are held while typing
    view = FileView(text, content_hash(text), user, ("r",))
    return asyncio.run(library.build_prompt(request, view, IndexAsSeenBy()))  # type: ignore[arg-type]


def _kept(prompt: Prompt) -> Sequence[str]:
    return [b.name for b in prompt.prepared.report.blocks if "kept while typing" in (b.reason or "")]


def test_alices_held_chunks_and_excerpts_do_not_reach_bobs_prompt(count_tokens: Callable[[str], int]) -> None:
    library = ContextLibrary(Settings(), count_tokens, "model")
    _complete(library, "alice", "")
    typed = _complete(library, "alice", "1")
    assert SECRET in typed.layout.text and _kept(typed)  # alice typing on keeps her own chunks and excerpts
    # bob, in the same block of the same file, his text differing from alice's buffer only there
    bob = _complete(library, "bob", "1")
    alone = _complete(ContextLibrary(Settings(), count_tokens, "model"), "bob", "1")
    assert SECRET not in bob.layout.text
    assert all(SECRET not in block.name for block in bob.prepared.report.blocks)
    assert _kept(bob) == [] and not bob.prepared.steady  # nothing says whether he typed what alice has
    assert bob.layout.text == alone.layout.text  # as if alice had never been there


def test_sessions_are_kept_per_user(count_tokens: Callable[[str], int]) -> None:
    library = ContextLibrary(Settings(), count_tokens, "model")
    for user in ("alice", "bob", None):
        _complete(library, user, "")
    assert library.sessions.counts()["file_sessions"] == 3
    assert library.sessions.get("r", PATH, "alice") is not library.sessions.get("r", PATH, "bob")
