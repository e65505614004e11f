"""A prompt planned to the editor's latency target (issue 46): how many context tokens a request can afford.

The worker learns its engine's speed from the replies it gets (``EngineSpeed``: the milliseconds a prompt token and a
generated token cost, and how many tokens a suggestion takes), as it runs, so under load too: a busy host's slower
tokens are what the next plan is made with. It remembers the last prompt it sent under each KV key (the engine keeps
that file's sequence), so it knows how much of a new prompt the engine holds already: the characters the two share
from the start. A prompt whose uncached part and expected decode fit the target is sent whole; otherwise the plan
is the budget whose uncached part does (never below ``min_tokens``), and the full prompt is filled in behind the
answer at the lowest priority (service.py), so the next request there finds it cached.

An engine that is fast enough (a GPU) always gets the full budget: its measured costs fit any sane target."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from context import Prompt
from ctxpress_core import inference
from ctxpress_core.wire.v1 import PlanReport
from serving.engine_api import CompletionResult
from syntax.textdiff import common_prefix_len

# Before the first measurement of each (a plan waits for the prompt's: no guess makes a fast engine's prompts small).
PRIOR_PROMPT_MS_PER_TOKEN = 8.0
PRIOR_DECODE_MS_PER_TOKEN = 90.0
PRIOR_COMPLETION_TOKENS = 12.0
# A prompt this short (uncached) says little about the prefill rate: its time is mostly one decode step.
MIN_MEASURED_PROMPT_TOKENS = 96
# Prompts remembered (one per KV key): the engine's pool holds about as many files.
MAX_HELD_PROMPTS = 512
_ALPHA = 0.3


class Ema:
    def __init__(self, prior: float) -> None:
        self.value = prior
        self.samples = 0

    def update(self, sample: float) -> None:
        self.value = sample if not self.samples else self.value + _ALPHA * (sample - self.value)
        self.samples += 1


@dataclass
class EngineSpeed:
    """The engine's costs as this worker sees them (its replies' timings: host load and other requests included)."""

    prompt_ms_per_token: Ema
    decode_ms_per_token: Ema
    completion_tokens: Ema

    @classmethod
    def prior(cls) -> EngineSpeed:
        return cls(Ema(PRIOR_PROMPT_MS_PER_TOKEN), Ema(PRIOR_DECODE_MS_PER_TOKEN), Ema(PRIOR_COMPLETION_TOKENS))

    def observe(self, result: CompletionResult, *, suggestion: bool = True) -> None:
        """``suggestion``: the reply answered an editor (its length is a suggestion's); False for a measurement."""
        figures = result.figures
        prompt_tokens = figures.get(inference.CTX_PROMPT_TOKENS)
        generated = figures.get(inference.CTX_COMPLETION_TOKENS)
        if prompt_tokens is None or generated is None or generated < 1:
            return  # a warm-up (nothing generated), or an engine that reports no figures
        uncached = prompt_tokens - figures.get(inference.CTX_CACHED_TOKENS, 0)
        first = result.first_token_ms
        if generated >= 2 and result.total_ms > first:
            self.decode_ms_per_token.update((result.total_ms - first) / (generated - 1))
        if uncached >= MIN_MEASURED_PROMPT_TOKENS:
            # the first token's time is the prompt's plus one decode step
            self.prompt_ms_per_token.update(max(first - self.decode_ms_per_token.value, 0.0) / uncached)
        if suggestion:
            self.completion_tokens.update(generated)

    def decode_ms(self, max_tokens: int) -> float:
        return min(self.completion_tokens.value, max_tokens) * self.decode_ms_per_token.value

    def figures(self) -> dict[str, float]:
        return {"prompt_ms_per_token": round(self.prompt_ms_per_token.value, 2),
                "decode_ms_per_token": round(self.decode_ms_per_token.value, 1),
                "completion_tokens": round(self.completion_tokens.value, 1)}


@dataclass(frozen=True)
class Sized:
    """A built prompt as the planner sees it: its text, its context tokens, and its budget."""

    text: str
    context_tokens: int
    budget_tokens: int

    @classmethod
    def of(cls, prompt: Prompt) -> Sized:
        report = prompt.prepared.report
        return cls(prompt.layout.text, report.context_tokens, report.budget_tokens or report.context_tokens)


class PromptPlanner:
    """One per worker: the engine's measured speed and the last prompt sent under each KV key."""

    def __init__(self, target_ms: float, min_tokens: int) -> None:
        self.target_ms = target_ms  # 0: no planning, every request gets its full budget
        self.min_tokens = min_tokens
        self.speed = EngineSpeed.prior()
        self._held: OrderedDict[str, str] = OrderedDict()

    def sent(self, key: str | None, prompt: str) -> None:
        """``prompt`` went to the engine under ``key``: its sequence now starts with it."""
        if key is None:
            return
        self._held[key] = prompt
        self._held.move_to_end(key)
        while len(self._held) > MAX_HELD_PROMPTS:
            self._held.popitem(last=False)

    def holds(self, key: str | None) -> bool:
        """Whether a prompt was sent under ``key`` (the engine may hold some of a new one there)."""
        return key is not None and key in self._held

    def cached_tokens(self, key: str | None, prompt: Sized) -> int:
        """How much of ``prompt`` the engine holds under ``key``: the share of its characters the last prompt
        sent there starts with, in tokens."""
        held = self._held.get(key) if key is not None else None
        if not held or not prompt.text:
            return 0
        shared = common_prefix_len(held, prompt.text)
        return int(prompt.context_tokens * shared / len(prompt.text))

    def expected_ms(self, key: str | None, prompt: Sized, max_tokens: int) -> float:
        uncached = max(prompt.context_tokens - self.cached_tokens(key, prompt), 0)
        return uncached * self.speed.prompt_ms_per_token.value + self.speed.decode_ms(max_tokens)

    def plan(self, key: str | None, full: Sized, max_tokens: int, left_ms: float) -> PlanReport | None:
        """The budget for a request whose full prompt is ``full``: None where the full prompt fits the target
        (or its deadline, ``left_ms``, if sooner) or planning is off, else the smaller budget and why."""
        if self.target_ms <= 0 or full.budget_tokens <= self.min_tokens or not self.speed.prompt_ms_per_token.samples:
            return None
        target = min(self.target_ms, left_ms)
        expected = self.expected_ms(key, full, max_tokens)
        if expected <= target:
            return None
        cached = self.cached_tokens(key, full)
        spare_ms = target - self.speed.decode_ms(max_tokens)
        # what the time buys, uncached: the planned prompt goes to a sequence of its own (planned_key)
        # (a prompt measured as costing nothing, its time all one decode step, buys the full budget)
        affordable = int(max(spare_ms, 0.0) / max(self.speed.prompt_ms_per_token.value, 1e-3))
        budget = max(self.min_tokens, min(full.budget_tokens, affordable))
        if budget >= full.budget_tokens:
            return None
        return PlanReport(
            budget_tokens=budget, full_budget_tokens=full.budget_tokens, target_ms=round(target),
            full_expected_ms=round(expected), cached_tokens=cached,
            reason=(f"the full prompt ({full.context_tokens} tokens, {cached} cached) would take ~{expected:,.0f} ms "
                    f"at {self.speed.prompt_ms_per_token.value:.1f} ms a prompt token and "
                    f"{self.speed.decode_ms(max_tokens):,.0f} ms of decoding; the target is {target:,.0f} ms"),
            **self.speed.figures())


def planned_key(key: str | None) -> str | None:
    """The KV key a planned prompt is sent under: a sequence of its own beside the file's, which the full prompt
    filled in behind it goes to. The two diverge early (the full one has more excerpts before the block), so in one
    sequence each keystroke's planned prompt would overwrite what the fill had processed, and a developer typing on
    would never get the full one."""
    return None if key is None else f"{key}#plan"


def calibration_prompt(nonce: str) -> str:
    """A prompt of about 150 tokens of ordinary code, new to the engine (``nonce`` first): the worker measures the
    engine with it at start, so that a fresh appliance's first completion is planned too. Above what a measurement
    needs (``MIN_MEASURED_PROMPT_TOKENS``, the engine's own 128-token chunk) and no longer: a request waits for it,
    and on a slow host (~45 prompt tokens a second) 330 tokens took 7.5 s."""
    body = "".join(f"def scale_{i}(values, factor={i}):\n    return [v * factor + {i} for v in values]\n\n"
                   for i in range(5))
    return f"# {nonce}\n{body}def total(values):\n    return "
