"""A prompt processed into the engine's cache with nothing generated (max_tokens=0): the lowest priority there,
given way to every live request between two chunks. Two callers: the full prompt behind an answer that was planned
smaller (prompt_plan.py), and the prompt at a cursor an editor says rests there (file_opened with a cursor). One per
user at a time: a newer one supersedes the older (cancelled in the engine too), so a storm of opened files costs the
engine one prompt per user, and the place a developer looks at now is the one that gets warm."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

from context import Prompt
from ctxpress_core import inference
from serving.engine_api import CompletionEngine, EngineRequest, complete
from workers import metrics
from workers.completion.prewarms import LatestPerUser
from workers.completion.prompt_plan import PromptPlanner

log = logging.getLogger("ctxpress.worker.completion")

# A fill preempted by live requests is sent again this many times (each time the engine keeps what it processed).
MAX_RESUMES = 20


class FillBehind:
    def __init__(self, engine: CompletionEngine, planner: PromptPlanner, deadline_s: float,
                 idle: asyncio.Event) -> None:
        self.engine = engine
        self.planner = planner
        self.deadline_s = deadline_s
        self.idle = idle  # nothing of this worker's at the engine: a warm-up sent now would not be preempted at once
        self.tasks = LatestPerUser()

    async def fill(self, prompt: Prompt, why: str) -> None:
        """``prompt`` processed for its user's next request (``why``: "fill_behind" or "prewarm", for the logs); run
        in ``tasks`` (one per user). The engine stops a warm-up as soon as a live request waits ("preempted",
        keeping what it processed): it is sent again once this worker has nothing at the engine, up to
        ``MAX_RESUMES`` times, so a developer typing on gets the full prompt between keystrokes. Never raises but
        when cancelled (a failure is logged and counted)."""
        for _ in range(MAX_RESUMES + 1):
            await self.idle.wait()
            try:
                result = await complete(self.engine, EngineRequest(
                    prompt.layout.text, 0, cache_key=prompt.cache_key, speculation="none",
                    request_id=uuid.uuid4().hex, deadline_ms=int(self.deadline_s * 1000),
                    template_markers=prompt.layout.markers, cache_salt=prompt.cache_salt))
            except Exception as exc:  # optional: the next request pays the prompt instead
                metrics.DEGRADED.labels(why, type(exc).__name__).inc()
                log.warning("%s of %s failed: %s", why, prompt.prepared.report.strategy, exc)
                return
            metrics.PREWARMED_TOKENS.inc(result.figures.get(inference.CTX_PROMPT_TOKENS, 0)
                                         - result.figures.get(inference.CTX_CACHED_TOKENS, 0))
            log.info(json.dumps({"event": why, "tokens": result.figures.get(inference.CTX_PROMPT_TOKENS),
                                 "reused": result.figures.get(inference.CTX_CACHED_TOKENS),
                                 "finish": result.finish_reason}))
            if result.finish_reason != "preempted":
                # only a whole prompt counts as held: the plan of the next request trusts it
                self.planner.sent(prompt.cache_key, prompt.layout.text)
                return
