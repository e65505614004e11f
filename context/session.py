"""What the completion worker keeps about one file between requests, in one place: a ``FileSession`` per
(owner, repository, path), in ``FileSessions``, a registry bounded by LRU.

A file's session holds its parsed versions (a tree cache of its own: the next request re-parses
incrementally from them, and in-file assembly and the retrieval query of one request share one parse),
the steady excerpts held for its enclosing block (assembly/steady.py), and the cross-file chunks placed after
them. Two repositories with the same relative path are two sessions: nothing of one is seen by the other.
So are two users' views of one file (``owner``: the team user, None on the single-user appliance): the held
chunks can be the previous requester's own saved files, and "kept while typing in the same block" would tell the
next one whether their text equals the other's unsaved buffer.
A file not asked about for a while loses all of it at once, so the worker's memory is bounded by the
number of sessions, however many files it sees.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from syntax.tree_cache import TreeCache

if TYPE_CHECKING:  # retrieval brings the database client along: explain and the tests of assembly need none
    from context.assembly.steady import Held  # the assembly is a user of sessions, not their dependency
    from context.sources.retrieval import RenderedChunk

# Files whose sessions are kept (the most recently used): the bound the separate parse-tree cache had.
MAX_FILES = 256


@dataclass(frozen=True)
class HeldChunks:
    """Cross-file chunks placed in a file's prompt, kept for the next keystroke in the same block."""

    block: tuple[str, int]  # the enclosing block they were placed before: its name and first line
    text: str  # as rendered into the prompt
    pieces: list[RenderedChunk]


class FileSession:
    """One file's state between requests. Its fields are read and replaced whole (no partial updates), so
    concurrent requests on one file see either the previous request's state or the next one's."""

    def __init__(self, repository: str, path: str, owner: str | None = None) -> None:
        self.owner = owner
        self.repository = repository
        self.path = path
        # One parsed version (and its base, see TreeCache): a file is in one language. A request in
        # another replaces it, as an edit would.
        self.trees = TreeCache(max_files=1)
        self.steady: Held | None = None
        self._chunks: HeldChunks | None = None
        self._lock = threading.Lock()

    def parsed(self) -> bool:
        """Whether a version of the file was parsed (its warm-up done)."""
        return bool(len(self.trees))

    def take_chunks(self) -> HeldChunks | None:
        """The held chunks, no longer held (a request puts back what it places)."""
        with self._lock:
            chunks, self._chunks = self._chunks, None
        return chunks

    def hold_chunks(self, chunks: HeldChunks) -> None:
        with self._lock:
            self._chunks = chunks

    def state(self) -> tuple[Held | None, HeldChunks | None]:
        """What the next keystroke's prompt is built from (``restore`` puts it back)."""
        with self._lock:
            return self.steady, self._chunks

    def restore(self, state: tuple[Held | None, HeldChunks | None]) -> None:
        with self._lock:
            self.steady, self._chunks = state

    @property
    def holds_chunks(self) -> bool:
        return self._chunks is not None


class FileSessions:
    """The sessions of the files most recently asked about, at most ``max_files``."""

    def __init__(self, max_files: int = MAX_FILES) -> None:
        self.max_files = max_files
        self._sessions: OrderedDict[tuple[str | None, str, str], FileSession] = OrderedDict()
        self._lock = threading.Lock()  # requests run in executor threads

    def get(self, repository: str, path: str, owner: str | None) -> FileSession:
        """The file's session as ``owner`` sees it (a new one at its first request); the least recently used beyond
        the bound go."""
        key = (owner, repository, path)
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                session = self._sessions[key] = FileSession(repository, path, owner)
            self._sessions.move_to_end(key)
            while len(self._sessions) > self.max_files:
                self._sessions.popitem(last=False)
        return session

    def __len__(self) -> int:
        return len(self._sessions)

    def counts(self) -> dict[str, int]:
        """How many files hold each kind of state (the worker's ``ctxpress_cache_entries``)."""
        with self._lock:
            sessions = list(self._sessions.values())
        return {"file_sessions": len(sessions),
                "tree_cache_files": sum(1 for s in sessions if len(s.trees)),
                "steady_excerpt_files": sum(1 for s in sessions if s.steady is not None),
                "held_chunk_files": sum(1 for s in sessions if s.holds_chunks)}
