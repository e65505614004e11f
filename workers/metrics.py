"""Prometheus metrics of the workers (served on ``/metrics``; Triton keeps its own).

Names follow the ``ctxpress_`` prefix the Grafana dashboard in ``infra/grafana`` reads.
"""

from __future__ import annotations

import re

from prometheus_client import Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 30.0, 60.0)

REQUESTS = Counter("ctxpress_requests", "Completion requests by outcome", ["mode", "outcome"])
ERRORS = Counter("ctxpress_errors", "Completion requests answered with an error", ["code"])
DEGRADED = Counter("ctxpress_degraded", "Requests served on a fallback path, by reason", ["part", "reason"])
REQUEST_LATENCY = Histogram("ctxpress_request_latency_seconds", "End-to-end latency in the worker",
                            ["mode", "scenario"], buckets=_LATENCY_BUCKETS)
STAGE_LATENCY = Histogram("ctxpress_stage_latency_seconds", "Latency per stage", ["stage"],
                          buckets=(0.001, 0.005, 0.01, 0.02, 0.05, *_LATENCY_BUCKETS))
FILE_TOKENS = Counter("ctxpress_file_tokens", "Tokens of the whole files completed in")
CONTEXT_TOKENS = Counter("ctxpress_context_tokens", "Context tokens after cropping")
PROMPT_TOKENS = Counter("ctxpress_prompt_tokens", "Prompt tokens sent to the model")
CACHED_PROMPT_TOKENS = Counter("ctxpress_cached_prompt_tokens", "Prompt tokens served from the engine's cache")
DRAFT_PROPOSED = Counter("ctxpress_draft_tokens_proposed", "Draft tokens proposed by speculative decoding")
DRAFT_ACCEPTED = Counter("ctxpress_draft_tokens_accepted", "Draft tokens accepted by the target model")
CONTEXT_SOURCES = Counter("ctxpress_context_sources", "Context sources used", ["source"])
FEEDBACK = Counter("ctxpress_feedback", "IDE feedback on completions", ["action"])
PREWARMED_TOKENS = Counter("ctxpress_prewarmed_tokens",
                           "Prompt tokens processed ahead of time: a cursor's prompt, or the full one behind a plan")
PLANNED = Counter("ctxpress_planned", "Completions whose prompt was planned smaller than its budget (latency target)")
TELEMETRY_DROPPED = Counter("ctxpress_telemetry_dropped", "Telemetry rows dropped (database down or backlog)")
CANCELLED = Counter("ctxpress_cancelled", "Completion requests abandoned by their caller (ctxpress.v1.cancel)")
OVERLOADED = Counter("ctxpress_overloaded",
                     "Completion requests rejected at once: the engine could not serve them in time")
REPLIES_REFUSED = Counter("ctxpress_replies_refused",
                          "Messages dropped unanswered: their reply subject is not the sender's own inbox",
                          ["service"])
CACHE_ENTRIES = Gauge("ctxpress_cache_entries", "Entries (or characters, *_chars) of the worker's per-file caches",
                      ["cache"])


# The ``scenario`` label comes from the client. Every distinct value is a new time series of the latency histogram
# (17 buckets each) that Prometheus and this process keep for ever: a client sending a fresh value per request
# would exhaust both. The project's own values keep their label; a client's own (the LSP's `scenario` option) too,
# while it looks like a label and until MAX_CLIENT_SCENARIOS have been seen; anything else counts as "other".
KNOWN_SCENARIOS = frozenset({"ide", "lsp", "eval", "http-fim", "http-infill", "http-tabby", *(
    f"bench-{name}" for name in ("short", "long", "file_switch", "concurrency", "typing", "team", "reopen", "jump",
                                 "load"))})
MAX_CLIENT_SCENARIOS = 16
_SCENARIO_SHAPE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_client_scenarios: set[str] = set()


def scenario_label(scenario: str | None) -> str:
    """The ``scenario`` label for a request's ``scenario`` (bounded: see above)."""
    if not scenario:
        return "ide"
    if scenario in KNOWN_SCENARIOS or scenario in _client_scenarios:
        return scenario
    if _SCENARIO_SHAPE.fullmatch(scenario) and len(_client_scenarios) < MAX_CLIENT_SCENARIOS:
        _client_scenarios.add(scenario)
        return scenario
    return "other"
