"""The suggestion after the one shown, computed before it is asked for (llama.vim calls it speculative FIM).

When a suggestion is answered, the worker goes on to complete the file as it will be if the suggestion is
accepted: the suggestion inserted at the cursor, the cursor after it. An editor asks again right after a Tab
(VS Code's inline completions, llama.vscode, llama.vim all do), and that request, the same file, cursor and
options, is answered from the work already done (or joins it while it runs) instead of starting afresh.

The work is speculative and must never delay what a user waits for: any live request supersedes it (it is
cancelled, and the engine told, at once), and it is only started when no other request of this worker is
waiting on the engine.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from ctxpress_core.wire.v1 import CompletionRequest, CompletionResponse

# Files with a follow-up held at once (a slot per (user, repository, path); an editor has one cursor a file).
MAX_HELD = 16
# What a request may differ in and still be the one a follow-up was computed for: its id and deadline, and the
# edits it reports (the accepted suggestion is one of them), which shape the prompt little.
_NOT_COMPARED = {"text", "content_hash", "line", "column", "request_id", "timeout_ms", "recent_edits", "scenario"}


@dataclass(frozen=True)
class Asked:
    """What identifies a request's answer: whose, which file version, where, and the options that shape it."""

    owner: str | None
    repository: str
    path: str
    digest: str
    line: int
    column: int
    options: str

    @classmethod
    def of(cls, request: CompletionRequest, owner: str | None, digest: str) -> Asked:
        return cls(owner, request.repository, request.path, digest, request.line, request.column,
                   request.model_dump_json(exclude=_NOT_COMPARED))

    @property
    def file(self) -> tuple[str | None, str, str]:
        return self.owner, self.repository, self.path


def accepted(text: str, line: int, column: int, completion: str) -> tuple[str, int, int] | None:
    """The text with ``completion`` inserted at the cursor, and the cursor after it (None: the cursor is not
    in the text)."""
    lines = text.split("\n")
    if line >= len(lines) or column > len(lines[line]):
        return None
    offset = sum(len(x) + 1 for x in lines[:line]) + column
    inserted = completion.split("\n")
    new_line = line + len(inserted) - 1
    new_column = (column if len(inserted) == 1 else 0) + len(inserted[-1])
    return text[:offset] + completion + text[offset:], new_line, new_column


class FollowUps:
    """The follow-ups in flight or done, one per file; each a task that answers the request it was computed for."""

    def __init__(self, max_held: int = MAX_HELD) -> None:
        self._held: OrderedDict[tuple[str | None, str, str], tuple[Asked, asyncio.Task[CompletionResponse]]] = \
            OrderedDict()
        self._max_held = max_held

    def __len__(self) -> int:
        return len(self._held)

    def claim(self, asked: Asked) -> asyncio.Task[CompletionResponse] | None:
        """The follow-up computed for exactly ``asked``, if there is one. A live request supersedes every other:
        those are cancelled."""
        match = None
        for held, task in self._held.values():
            if held == asked and match is None:
                match = task
            elif not task.done():
                task.cancel()
        self._held.clear()
        return match

    def start(self, asked: Asked, work: Coroutine[Any, Any, CompletionResponse]) -> None:
        previous = self._held.pop(asked.file, None)
        if previous is not None:
            previous[1].cancel()
        task = asyncio.create_task(work)
        task.add_done_callback(_retrieve_exception)
        self._held[asked.file] = (asked, task)
        while len(self._held) > self._max_held:
            _, (_, oldest) = self._held.popitem(last=False)
            oldest.cancel()


def _retrieve_exception(task: asyncio.Task[CompletionResponse]) -> None:
    """A follow-up that failed (superseded, the engine busy or down) is simply not there: nobody waits for it."""
    if not task.cancelled():
        task.exception()
