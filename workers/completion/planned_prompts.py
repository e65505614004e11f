"""Which prompt a request is sent, and a resting cursor pre-warmed: the full one, or one planned to the latency
target (prompt_plan.py) with the full one filled in behind the answer (fill_behind.py)."""

from __future__ import annotations

import dataclasses
import logging

from context import ContextLibrary, FileView, Prompt, Retriever, file_tokens, request_features
from ctxpress_core.wire.v1 import CompletionRequest, PlanReport
from workers import metrics
from workers.completion.fill_behind import FillBehind
from workers.completion.prompt_plan import PromptPlanner, Sized, planned_key

log = logging.getLogger("ctxpress.worker.completion")


class PlannedPrompts:
    def __init__(self, library: ContextLibrary, planner: PromptPlanner, fill: FillBehind, retriever: Retriever | None,
                 budget_tokens: int) -> None:
        self.library = library
        self.planner = planner
        self.fill = fill
        self.retriever = retriever
        self.budget_tokens = budget_tokens  # a request's full budget (mode=optimized)

    async def choose(self, request: CompletionRequest, view: FileView,
                     left_ms: float) -> tuple[Prompt, PlanReport | None, Prompt | None]:
        """The prompt to send within ``left_ms``, the plan that made it smaller (None: the full one), and the full
        prompt where it was built. A file the engine holds nothing of is planned from its size, before the full
        prompt is built (``fill_full`` builds it after the answer): its cost is all uncached anyway, and building
        the assembly of a long file first took a few hundred milliseconds of the plan's time. Planned: only a
        request that names no budget of its own, with the feature ``plan``."""
        plannable = request.budget_tokens is None and request_features(request).get("plan", False)
        key, plan, full = self.library.cache_key(request, view), None, None
        if plannable and not self.planner.holds(key):
            estimate = min(file_tokens(view.text, None), self.budget_tokens)
            plan = self.planner.plan(key, Sized("", estimate, self.budget_tokens), request.max_tokens, left_ms)
        if plan is None:
            full = await self.library.build_prompt(request, view, self.retriever)
            plan = self.planner.plan(key, Sized.of(full), request.max_tokens, left_ms) if plannable else None
            if plan is None:
                return full, None, full
        smaller = await self.library.build_smaller(request, view, self.retriever, plan.budget_tokens)
        smaller = dataclasses.replace(smaller, cache_key=planned_key(smaller.cache_key))
        if full is not None and (self.planner.expected_ms(smaller.cache_key, Sized.of(smaller), request.max_tokens)
                                 >= self.planner.expected_ms(key, Sized.of(full), request.max_tokens)):
            return full, None, full  # the full prompt, mostly held already, costs less than a planned one
        smaller.prepared.report.plan = plan
        return smaller, plan, full

    async def fill_full(self, request: CompletionRequest, view: FileView, full: Prompt | None) -> None:
        """The full prompt behind a planned answer (built here where ``choose`` did not)."""
        if full is None:
            try:
                full = await self.library.build_prompt(request, view, self.retriever)
            except Exception as exc:  # optional: the next request there is planned again
                metrics.DEGRADED.labels("fill_behind", type(exc).__name__).inc()
                log.warning("building the full prompt for %s failed: %s", request.path, exc)
                return
        await self.fill.fill(full, "fill_behind")
