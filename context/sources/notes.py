"""Model-written notes of a file's opaque blocks (syntax/notes.py), read from the index for the request's file
when the feature ``model_notes`` is on: the assembly shows each in its block's summary.

Notes change rarely (written in idle engine time, once per block version), so a file's notes are read at
most every ``ttl_s`` and the same mapping is handed out in between (the noted outline is remembered by it).
A slow or failed read leaves the request without notes, never late.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy.orm import Session

from db.notes import notes_for_file
from db.session import engine_for

log = logging.getLogger("ctxpress.context.notes")

MAX_FILES = 512  # files whose notes are held at once


class NoteReader:
    def __init__(self, database_url: str, *, timeout_ms: float = 30.0, ttl_s: float = 30.0) -> None:
        self.database_url = database_url
        self.timeout_ms = timeout_ms
        self.ttl_s = ttl_s
        self._held: OrderedDict[tuple[str, str], tuple[float, Mapping[str, str]]] = OrderedDict()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="notes-db")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def for_file(self, repository: str, path: str) -> Mapping[str, str]:
        """The notes of ``path``'s blocks by note key ({}: none, or the index could not say in time)."""
        key = (repository, path)
        held = self._held.get(key)
        now = time.monotonic()
        if held is not None and now - held[0] < self.ttl_s:
            return held[1]
        future = asyncio.get_running_loop().run_in_executor(self._pool, self._read, repository, path)
        try:
            notes: Mapping[str, str] = await asyncio.wait_for(future, timeout=self.timeout_ms / 1000)
        except Exception as exc:  # TimeoutError included: the request goes on with what is held
            log.info("notes of %s:%s not read: %s", repository, path, type(exc).__name__)
            return held[1] if held is not None else {}
        if held is not None and held[1] == notes:
            notes = held[1]  # the same mapping: the file's noted outline stays valid
        self._held[key] = (now, notes)
        self._held.move_to_end(key)
        while len(self._held) > MAX_FILES:
            self._held.popitem(last=False)
        return notes

    def _read(self, repository: str, path: str) -> dict[str, str]:
        with Session(engine_for(self.database_url)) as session:
            return notes_for_file(session, repository, path)
