"""What each request's outcome leaves behind: a log line, the Prometheus metrics, and a telemetry row
(the seed's habit: every request, every figure)."""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict

from ctxpress_core.wire.v1 import CompletionRequest, CompletionResponse, ErrorBody, Feedback
from workers import metrics
from workers.telemetry import TelemetryWriter

log = logging.getLogger("ctxpress.worker.completion")

_STAGES = ("queue", "context", "prompt", "decode", "total")
_NOT_SERVED = object()


# Completions whose feedback this worker still takes (an editor sends it within seconds of the suggestion).
REMEMBERED_COMPLETIONS = 50_000


class Observer:
    def __init__(self, telemetry: TelemetryWriter | None = None) -> None:
        self.telemetry = telemetry  # None: logs and metrics only
        # completion id -> the user it was served to: feedback is recorded for one's own completions only
        self._served: OrderedDict[str, str | None] = OrderedDict()

    def completion(self, request: CompletionRequest, response: CompletionResponse, user: str | None = None) -> None:
        """Log, count and record one completion."""
        ctx, t = response.context, response.timings
        outcome = "degraded" if ctx.degraded else "ok"
        scenario = request.scenario or "ide"
        metrics.REQUESTS.labels(request.mode, outcome).inc()
        # a bounded label (the client chooses the scenario); the telemetry row keeps the value as sent
        metrics.REQUEST_LATENCY.labels(request.mode, metrics.scenario_label(request.scenario)).observe(
            t.total_ms / 1000)
        for stage in ("context", "queue", "prompt", "decode"):
            metrics.STAGE_LATENCY.labels(stage).observe(getattr(t, f"{stage}_ms") / 1000)
        if ctx.degraded:
            metrics.DEGRADED.labels("context", ctx.degraded.split(":")[0]).inc()
        if ctx.plan:
            metrics.PLANNED.inc()
        metrics.FILE_TOKENS.inc(ctx.file_tokens)
        metrics.CONTEXT_TOKENS.inc(ctx.context_tokens)
        metrics.PROMPT_TOKENS.inc(ctx.prompt_tokens or 0)
        metrics.CACHED_PROMPT_TOKENS.inc(ctx.cached_tokens or 0)
        metrics.DRAFT_PROPOSED.inc(response.draft_tokens_proposed or 0)
        metrics.DRAFT_ACCEPTED.inc(response.draft_tokens_accepted or 0)
        for source in ctx.sources:
            metrics.CONTEXT_SOURCES.labels(source).inc()
        row = {
            "request_id": response.id, "repository": request.repository, "path": request.path,
            "language": response.language, "mode": request.mode, "scenario": scenario, "model": response.model,
            "outcome": outcome, "degraded_reason": ctx.degraded, "strategy": ctx.strategy, "sources": ctx.sources,
            "features": json.dumps(response.features), "file_tokens": ctx.file_tokens,
            "context_tokens": ctx.context_tokens, "prompt_tokens": ctx.prompt_tokens,
            "cached_tokens": ctx.cached_tokens, "restored_tokens": ctx.restored_tokens,
            "restore_ms": ctx.restore_ms, "completion_tokens": response.completion_tokens,
            "draft_tokens_proposed": response.draft_tokens_proposed,
            "draft_tokens_accepted": response.draft_tokens_accepted, "user_name": user,
            # a prompt planned smaller than its budget (the latency target, or the work ahead under load)
            "planned_budget_tokens": ctx.plan.budget_tokens if ctx.plan else None,
            **{f"{stage}_ms": getattr(t, f"{stage}_ms") for stage in _STAGES},
        }
        log.info(json.dumps({"event": "completion", **{k: v for k, v in row.items() if k != "features"}}))
        self._served[response.id] = user
        self._served.move_to_end(response.id)
        while len(self._served) > REMEMBERED_COMPLETIONS:
            self._served.popitem(last=False)
        if self.telemetry is not None:
            self.telemetry.record_event(row)

    def error(self, request: CompletionRequest | None, request_id: str, body: ErrorBody, received_at: float,
              user: str | None = None) -> None:
        """Log, count and record a request answered with an error (``request``: None when it did not parse)."""
        mode = request.mode if request else "unknown"
        metrics.REQUESTS.labels(mode, "error").inc()
        metrics.ERRORS.labels(body.code.value).inc()
        log.info(json.dumps({"event": "error", "id": request_id, "code": body.code.value, "message": body.detail}))
        if self.telemetry is not None:
            self.telemetry.record_event({
                "request_id": request_id, "repository": request.repository if request else "",
                "path": request.path if request else "", "mode": mode,
                "scenario": (request.scenario if request else None) or "ide", "outcome": "error",
                "error_code": body.code.value, "sources": [], "features": "{}",
                "total_ms": (time.perf_counter() - received_at) * 1000, "user_name": user,
            })

    def feedback(self, event: Feedback, user: str | None = None) -> bool:
        """An IDE's accept/dismiss of a completion: for the real acceptance rate. Recorded only for a completion
        this worker served to the same user (False otherwise): another user's feedback must not make someone's
        completion look accepted, nor can made-up ids fill the table."""
        if self._served.get(event.completion_id, _NOT_SERVED) != user:
            metrics.FEEDBACK.labels("not_yours").inc()
            return False
        metrics.FEEDBACK.labels(event.action).inc()
        if self.telemetry is not None:
            self.telemetry.record_feedback({**event.model_dump(), "user_name": user})
        return True


def observe_retrieval(report: dict[str, object] | None) -> None:
    """Cross-file retrieval that was skipped (no index yet, its deadline, …) is a degraded request."""
    skipped = (report or {}).get("skipped")
    if skipped:
        metrics.DEGRADED.labels("retrieval", str(skipped)).inc()
        log.info(json.dumps({"event": "degraded", "part": "retrieval", "why": skipped}))
