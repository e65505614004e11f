"""The note writer: in idle engine time, the completion worker asks the model for a one-line note on each block
the index marked as opaque (syntax/notes.py, db/notes.py) and stores it, one block at a time.

Notes must never delay a completion: one is started only when this worker has had no request for
``notes_idle_s`` and nothing of its own waits on the engine, and it is given up (the engine told, the block
handed back) the moment a request arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator

from sqlalchemy.orm import Session

from db import notes as store
from db.session import engine_for
from serving.engine_api import CompletionEngine, complete
from serving.fim import STOP_WORDS, chat_prompt
from syntax.notes import clean_note
from workers import metrics
from workers.completion.engine_load import EngineLoad

log = logging.getLogger("ctxpress.worker.notes")

SYSTEM = "You are a senior engineer who documents code tersely."
QUESTION = ("In one line of at most 15 words, say what this {language} code does, as its docstring's first line "
            "would. Answer with that line only.\n\n```{language}\n{source}\n```")
NOTE_TIMEOUT_S = 120.0
EMPTY_POLL_S = 30.0  # nothing to write: look again after this
WATCH_S = 0.05  # how often a running note checks for a request


class Activity:
    """When this worker last had a request, and how many it holds now."""

    def __init__(self) -> None:
        self.held = 0
        self.last = time.monotonic()

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        self.held += 1
        self.last = time.monotonic()
        try:
            yield
        finally:
            self.held -= 1
            self.last = time.monotonic()

    def idle_s(self) -> float:
        return 0.0 if self.held else time.monotonic() - self.last


async def write_note(engine: CompletionEngine, language: str, source: str, *, max_tokens: int,
                     request_id: str | None = None) -> str | None:
    """The model's one-line note on ``source`` (None: its answer was not usable as one)."""
    prompt, markers = chat_prompt(SYSTEM, QUESTION.format(language=language, source=source))
    result = await complete(engine, prompt, template_markers=markers, max_tokens=max_tokens,
                            stop_words=STOP_WORDS, timeout_s=NOTE_TIMEOUT_S, request_id=request_id)
    return clean_note(result.text)


class NoteWriter:
    def __init__(self, engine: CompletionEngine, database_url: str, activity: Activity, load: EngineLoad, *,
                 idle_s: float, max_tokens: int) -> None:
        self.engine = engine
        self.database_url = database_url
        self.activity = activity
        self.load = load
        self.idle_s = idle_s
        self.max_tokens = max_tokens
        self.written = 0
        self.interrupted = 0

    def idle(self) -> bool:
        return self.load.inflight == 0 and self.activity.idle_s() >= self.idle_s

    async def run(self, stop: asyncio.Event) -> None:
        """Write notes until ``stop``; a database or engine that fails is tried again later, never fatal."""
        while not stop.is_set():
            try:
                wait = await self.write_one_when_idle(stop)
            except Exception as exc:
                log.warning("note writer: %s: %s", type(exc).__name__, exc)
                wait = EMPTY_POLL_S
            if wait:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)

    async def write_one_when_idle(self, stop: asyncio.Event) -> float:
        """Once idle, claim one block and write its note; returns how long to wait before the next."""
        while not self.idle():
            if stop.is_set():
                return 0.0
            await asyncio.sleep(max(WATCH_S, self.idle_s - self.activity.idle_s()))
        pending = await asyncio.to_thread(self._claim)
        if pending is None:
            return EMPTY_POLL_S
        request_id = uuid.uuid4().hex
        task = asyncio.create_task(write_note(self.engine, pending.language, pending.source,
                                              max_tokens=self.max_tokens, request_id=request_id))
        while not task.done():
            await asyncio.wait({task}, timeout=WATCH_S)
            if not task.done() and (self.activity.held or self.load.inflight or stop.is_set()):
                task.cancel()  # complete() tells the engine
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
                await asyncio.to_thread(self._with_session, store.release, pending)
                self.interrupted += 1
                metrics.NOTES.labels("interrupted").inc()
                return 0.0
        try:
            note = task.result()
        except Exception as exc:  # the engine failed (down, restarting): the block is not to blame
            log.info("note writer: the engine failed (%s: %s); trying again in %.0f s", type(exc).__name__, exc,
                     EMPTY_POLL_S)
            await asyncio.to_thread(self._with_session, store.release, pending)
            metrics.NOTES.labels("engine_failed").inc()
            return EMPTY_POLL_S
        await asyncio.to_thread(self._with_session, store.store_note, pending, note)
        self.written += note is not None
        metrics.NOTES.labels("written" if note is not None else "unusable").inc()
        return 0.0

    def _claim(self) -> store.PendingNote | None:
        with Session(engine_for(self.database_url)) as session, session.begin():
            return store.claim_pending(session)

    def _with_session(self, write: Callable[..., None], pending: store.PendingNote, *args: object) -> None:
        with Session(engine_for(self.database_url)) as session, session.begin():
            write(session, pending, *args)
