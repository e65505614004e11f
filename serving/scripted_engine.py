"""An in-process ``CompletionEngine`` (serving/engine_api.py) for tests of the service and for tools that
need no model: it answers every prompt with the same text, streamed a word at a time, and keeps the
requests it was given and the ids it was told to cancel."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

from ctxpress_core import inference
from serving.engine_api import EngineRequest, Piece


class ScriptedEngine:
    def __init__(self, answer: str = "", *, step_s: float = 0.0, fail_with: Exception | None = None,
                 preempt_warm_ups: int = 0) -> None:
        self.answer = answer
        # the first this many warm-ups (max_tokens=0) end "preempted", as the CPU engine ends one when a live
        # request waits
        self.preempt_warm_ups = preempt_warm_ups
        self.fail_with = fail_with  # raised once the request has reached it, as a broken model server fails
        self.step_s = step_s  # the time each piece takes: long enough, and a test can cancel mid-stream
        self.requests: list[EngineRequest] = []
        self.cancelled: list[str] = []
        self.streaming = asyncio.Event()  # set when a request has reached the engine

    def __str__(self) -> str:
        return "the scripted engine"

    async def stream(self, request: EngineRequest) -> AsyncIterator[Piece]:
        self.requests.append(request)
        self.streaming.set()
        if self.fail_with is not None:
            raise self.fail_with
        words = re.findall(r"\s*\S+|\s+", self.answer)[:request.max_tokens]
        for word in words:
            await asyncio.sleep(self.step_s)
            if request.request_id is not None and request.request_id in self.cancelled:
                yield Piece("", finish="cancelled")
                return
            yield Piece(word)
        finish = "length" if words and len(words) == request.max_tokens else "stop"
        if request.max_tokens == 0:
            finish = "preempted" if self.preempt_warm_ups > 0 else "length"
            self.preempt_warm_ups -= 1
        yield Piece("", {inference.CTX_PROMPT_TOKENS: len(request.prompt) // 4,
                         inference.CTX_COMPLETION_TOKENS: len(words)}, finish)

    async def cancel(self, request_id: str) -> bool:
        self.cancelled.append(request_id)
        return any(r.request_id == request_id for r in self.requests)
