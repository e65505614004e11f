"""``ctxpress.v1.file_opened``: an opened file is stored, its parse tree and symbol table warmed before its first
completion; and where the editor says where its cursor rests (an opened file, a cursor that stopped after a jump,
llama.vscode's idle requests with n_predict 0 through the HTTP bridge), the prompt for that place is assembled and
processed in the engine (max_tokens=0) so that the first keystroke there finds its KV."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor

from pydantic import ValidationError

from context import MAX_LINE_CHARS, ContextLibrary, longest_line, warm_file
from ctxpress_core.errors import CtxpressError, ErrorCode
from ctxpress_core.features import resolve as resolve_features
from ctxpress_core.settings import Settings
from ctxpress_core.wire.v1 import CompletionRequest, ErrorBody, ErrorResponse, FileOpened, content_hash
from workers import metrics
from workers.completion.file_store import FileStore
from workers.completion.fill_behind import FillBehind
from workers.completion.planned_prompts import PlannedPrompts
from workers.completion.request import within_size_limit
from workers.grants import Caller

log = logging.getLogger("ctxpress.worker.completion")


class FileEvents:
    """The files the completion service (service.py) serves: it shares their store, the context library and the
    background thread with it."""

    def __init__(self, settings: Settings, count_tokens: Callable[[str], int], files: FileStore,
                 library: ContextLibrary, prompts: PlannedPrompts, fill: FillBehind,
                 authorize: Callable[[str | None, str], Awaitable[Caller]], background: Executor) -> None:
        self.settings = settings
        self.count_tokens = count_tokens
        self.files = files
        self.library = library
        self.prompts = prompts
        self.fill = fill  # the pre-warm of a cursor's prompt, one per user with the fills behind answers
        self.authorize = authorize
        self.background = background

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
        self._prewarm(event, caller)
        return json.dumps({"ok": True, "warm_ms": warm_ms}).encode()

    def _prewarm(self, event: FileOpened, caller: Caller) -> None:
        """The prompt for the cursor, when the editor says where it rests: assembled and processed in the engine
        (max_tokens=0, fill_behind.py), so that a request there finds its KV; the engine gives way to live
        requests, and the user's next pre-warm or fill supersedes it."""
        features = resolve_features(event.features)
        if not (features["prewarm"] and features["prefix_cache"]) or event.line is None:
            return  # without a cursor there is no prompt to predict
        request = CompletionRequest(repository=event.repository, path=event.path, text=event.text,
                                    line=min(event.line, event.text.count("\n")), column=event.column,
                                    language=event.language, mode="optimized", features=event.features)
        self.fill.tasks.start(caller.user, self._prepare_and_fill(request, caller))

    async def _prepare_and_fill(self, request: CompletionRequest, caller: Caller) -> None:
        """The prompt a request here would be sent now, planned as it would be (prompt_plan.py), under the key it
        would be sent under: a second of rest on a CPU covers a planned prompt, not a full one. The full one is
        filled in behind that request's answer."""
        assert request.text is not None
        try:
            # planned within the target alone: a resting cursor has no deadline
            prompt, _, _ = await self.prompts.choose(request, caller.view(request.text, content_hash(request.text)),
                                                     self.prompts.planner.target_ms)
        except Exception as exc:  # optional: the first keystroke pays the prompt instead
            metrics.DEGRADED.labels("prewarm", type(exc).__name__).inc()
            log.warning("pre-warming %s failed: %s", request.path, exc)
            return
        await self.fill.fill(prompt, "prewarm")
