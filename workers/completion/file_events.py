"""``ctxpress.v1.file_opened``: an opened file is stored, its parse tree and symbol table warmed before its first
completion, then the stable head of its prompt pre-warmed in the engine (max_tokens=0) so that the first
keystroke finds its KV."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor

from pydantic import ValidationError

from context import MAX_LINE_CHARS, ContextLibrary, cache_key, longest_line, prewarm_head, warm_file
from ctxpress_core import inference
from ctxpress_core.errors import CtxpressError, ErrorCode
from ctxpress_core.features import resolve as resolve_features
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import CompletionRequest, ErrorBody, ErrorResponse, FileOpened, content_hash
from serving.engine_api import CompletionEngine, EngineRequest, complete
from workers import metrics
from workers.completion.file_store import FileStore
from workers.completion.prewarms import LatestPerUser
from workers.completion.request import within_size_limit
from workers.grants import Caller

log = logging.getLogger("ctxpress.worker.completion")


class FileEvents:
    """The files the completion service (service.py) serves: it shares their store, the context library and the
    background thread with it."""

    def __init__(self, settings: Settings, engine: CompletionEngine, count_tokens: Callable[[str], int],
                 model_name: str, files: FileStore, library: ContextLibrary,
                 authorize: Callable[[str | None, str], Awaitable[Caller]], background: Executor) -> None:
        self.settings = settings
        self.engine = engine
        self.count_tokens = count_tokens
        self.model_name = model_name
        self.files = files
        self.library = library
        self.authorize = authorize
        self.background = background
        self.prewarms = LatestPerUser()

    async def file_opened(self, data: bytes, user: str | None = None) -> bytes:
        """Warm the parse tree and symbol table of a file before its first completion."""
        try:
            # bounded like a completion request: its text is parsed and its tokens counted on this worker
            within_size_limit(data, self.settings.max_request_bytes, "file_opened")
            event = FileOpened.model_validate_json(data)
            caller = await self.authorize(user, event.repository)
        except ValidationError as exc:
            body = ErrorBody(code=ErrorCode.INVALID_REQUEST, message=f"invalid file_opened: {exc.errors()[0]['msg']}")
            return ErrorResponse(error=body).model_dump_json().encode()
        except CtxpressError as exc:
            return ErrorResponse(error=ErrorBody.of(exc)).model_dump_json().encode()
        self.files.put(caller.file_key(content_hash(event.text)), event.text)
        loop = asyncio.get_running_loop()
        if await loop.run_in_executor(None, longest_line, event.text) > MAX_LINE_CHARS:
            return json.dumps({"ok": False, "reason": "long lines: completions there use the window"}).encode()
        try:
            session = self.library.sessions.get(event.repository, event.path, caller.user)
            warm_ms = await loop.run_in_executor(
                self.background, functools.partial(warm_file, session, event.text, event.language,
                                                   count_tokens=self.count_tokens))
        except Exception:  # warming is optional: the first completion will parse instead
            log.exception("warming %s failed", event.path)
            return json.dumps({"ok": False, "reason": "warming failed; the first completion parses instead"}).encode()
        self.prewarms.start(caller.user, self._prewarm_logged(event, caller))  # one per user at a time
        return json.dumps({"ok": True, "warm_ms": warm_ms}).encode()

    async def _prewarm_logged(self, event: FileOpened, caller: Caller) -> None:
        try:
            await self._prewarm(event, caller)
        except Exception as exc:  # optional: the first keystroke pays the prompt instead
            metrics.DEGRADED.labels("prewarm", type(exc).__name__).inc()
            log.warning("pre-warming %s failed: %s", event.path, exc)

    async def _prewarm(self, event: FileOpened, caller: Caller) -> None:
        """The stable part of the file's prompt processed in the engine (max_tokens=0), so that the first
        keystroke finds its KV; the engine gives way to live requests."""
        features = resolve_features(event.features)
        if not (features["prewarm"] and features["prefix_cache"]):
            return
        if event.line is None:  # without a cursor there is no prompt to predict
            return
        request = CompletionRequest(repository=event.repository, path=event.path, text=event.text,
                                    line=min(event.line, event.text.count("\n")), column=event.column,
                                    language=event.language, mode="optimized", features=event.features)
        loop = asyncio.get_running_loop()
        prepared = await loop.run_in_executor(None, functools.partial(
            self.library.preparer.prepare, request, event.text, content_hash(event.text), owner=caller.user))
        # what the next request's prompt will start with
        head = prewarm_head(prepared)
        if head is None:
            return
        result = await complete(self.engine, EngineRequest(
            head.text, 0, cache_key=cache_key(self.model_name, request, features, caller.kv_owner),
            speculation="none", deadline_ms=int(self.settings.triton_timeout_s * 1000), template_markers=head.markers,
            cache_salt=self.library.cache_salt(caller.kv_owner)))
        metrics.PREWARMED_TOKENS.inc(result.figures.get(inference.CTX_PROMPT_TOKENS, 0))
        log.info(json.dumps({"event": "prewarm", "path": event.path, "tokens": result.figures.get(
            inference.CTX_PROMPT_TOKENS), "reused": result.figures.get(inference.CTX_CACHED_TOKENS),
            "finish": result.finish_reason}))
