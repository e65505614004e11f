"""Speculative decoding: who proposes draft tokens, and a policy choosing per request.

Both methods are verified the same way by the target model (one batch with logits at every
position, greedy acceptance), so the output is the target's own greedy decoding whatever the
drafts were. What differs is the cost of a proposal:

- **n-gram** (prompt lookup): the continuation of the latest earlier occurrence of the last
  few tokens in the prompt and output. Free to propose; code repeats identifiers and whole
  lines, so it is often right.
- **draft model**: a smaller model of the same tokenizer proposes k tokens greedily. It must
  also process the prompt, which on a CPU costs a third of what the target pays.

The policy estimates, for each method and k, the tokens produced per millisecond from figures
measured on this machine (target decode time per step, verification cost per extra token,
draft time per token, prompt tokens the draft would have to process) and the acceptance rate
recently seen (an exponential moving average per method), and takes the best, "none"
included. The seed's fixed rule (draft model above 1,024 tokens) is only its starting prior.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from serving.engine.kv_pool import common_prefix
from serving.engine.llama_runner import LlamaRunner


def ngram_proposal(history: Sequence[int], k: int, *, max_n: int = 4, min_n: int = 2,
                   window: int = 4096) -> list[int]:
    """Up to ``k`` tokens that followed the latest earlier occurrence of the last n tokens
    (longest n first), searched in the last ``window`` tokens of ``history``."""
    if k <= 0 or len(history) < min_n + 1:
        return []
    h = list(history[-window:])
    end = len(h)
    for n in range(min(max_n, end - 1), min_n - 1, -1):
        tail = h[end - n:]
        # latest occurrence that is not the tail itself and has something after it
        for start in range(end - n - 1, -1, -1):
            if h[start:start + n] == tail:
                follow = h[start + n:start + n + k]
                if follow:
                    return follow
                break
    return []


class DraftModel:
    """A smaller model proposing k greedy tokens; keeps the KV of the last history it saw."""

    def __init__(self, runner: LlamaRunner) -> None:
        self.runner = runner
        self.tokens: list[int] = []

    def propose(self, history: Sequence[int], k: int) -> tuple[list[int], int, float, float]:
        """Returns (drafts, history tokens processed, ms for them, ms for the k tokens)."""
        r = self.runner
        keep = min(common_prefix(self.tokens, history), max(len(history) - 1, 0))
        if len(history) + k + 1 > r.n_ctx:
            return [], 0, 0.0, 0.0
        r.remove(0, keep)
        t0 = time.perf_counter()
        r.decode(0, history[keep:], keep, all_logits=False)
        t1 = time.perf_counter()
        self.tokens = list(history)
        drafts: list[int] = []
        for _ in range(k):
            tok = r.argmax(-1)
            drafts.append(tok)
            if r.is_eog(tok) or len(drafts) == k:
                break
            r.decode(0, [tok], len(self.tokens), all_logits=False)
            self.tokens.append(tok)
        t2 = time.perf_counter()
        return drafts, len(history) - keep, (t1 - t0) * 1000, (t2 - t1) * 1000


def expected_tokens_per_step(acceptance: float, k: int) -> float:
    """Tokens a verification step yields when each draft token is accepted with probability
    ``acceptance`` independently: accepted prefix plus the target's own next token."""
    a = min(max(acceptance, 0.0), 0.99)
    return (1 - a ** (k + 1)) / (1 - a)


@dataclass
class SpeculationChoice:
    method: str  # "none" | "ngram" | "draft"
    k: int
    expected_speedup: float
    reason: str


@dataclass
class Ema:
    """An exponential moving average of a measured figure, starting from a prior."""

    value: float
    alpha: float = 0.2

    def update(self, sample: float) -> None:
        self.value = (1 - self.alpha) * self.value + self.alpha * sample


@dataclass
class SpeculationPolicy:
    """Measured figures in, a (method, k) choice out. Thread-safe; the engine feeds it."""

    draft_available: bool = False
    # Priors, replaced by measurements as requests run (ms on this machine's 2 cores).
    target_step_ms: Ema = field(default_factory=lambda: Ema(75.0))
    verify_extra_ms: Ema = field(default_factory=lambda: Ema(12.0))  # per extra token in a step
    draft_token_ms: Ema = field(default_factory=lambda: Ema(33.0))
    draft_prompt_ms_per_token: Ema = field(default_factory=lambda: Ema(6.0))
    acceptance: dict[str, Ema] = field(default_factory=lambda: {"ngram": Ema(0.5), "draft": Ema(0.64)})
    ks: tuple[int, ...] = (2, 3, 4, 6, 8)
    # A method the figures rule out is still tried now and then, or its acceptance estimate
    # would never recover from one bad stretch.
    explore_every: int = 10
    # ...but only when trying it costs little: exploring the draft model on a cold ~1,000-token
    # prompt made the draft process it all first (+4-6 s on 2 cores, measured: every 10th request
    # of the long-file eval, which set its p95). It waits for a request whose draft prompt is short
    # or already in the draft's cache.
    explore_max_ms: float = 250.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _since_explore: dict[str, int] = field(default_factory=dict, repr=False)

    def choose(self, *, max_tokens: int, draft_prompt_tokens: int = 0, allowed: Sequence[str] = ("ngram", "draft"),
               ) -> SpeculationChoice:
        """``draft_prompt_tokens``: prompt tokens the draft model would have to process first."""
        with self._lock:
            step = self.target_step_ms.value
            best = SpeculationChoice("none", 0, 1.0, "no method expected to beat plain decoding")
            for method in allowed:
                if method == "draft" and not self.draft_available:
                    continue
                acc = self.acceptance[method].value
                for k in self.ks:
                    tokens = expected_tokens_per_step(acc, k)
                    cost = step + k * self.verify_extra_ms.value
                    if method == "draft":
                        cost += k * self.draft_token_ms.value
                        # the draft's prompt processing, spread over the steps of this request
                        steps = max(1.0, max_tokens / tokens)
                        cost += draft_prompt_tokens * self.draft_prompt_ms_per_token.value / steps
                    speedup = (tokens / cost) * step
                    if speedup > best.expected_speedup * 1.02:
                        best = SpeculationChoice(
                            method, k, speedup,
                            f"acceptance {acc:.2f}, {tokens:.2f} tokens/step for {cost:.0f} ms "
                            f"vs {step:.0f} ms plain")
            for method in allowed:
                if method == best.method or (method == "draft" and not self.draft_available):
                    continue
                self._since_explore[method] = self._since_explore.get(method, 0) + 1
                overhead = draft_prompt_tokens * self.draft_prompt_ms_per_token.value if method == "draft" else 0.0
                if self._since_explore[method] >= self.explore_every and overhead <= self.explore_max_ms:
                    self._since_explore[method] = 0
                    return SpeculationChoice(method, min(self.ks), 0.0, "exploring: refresh its measured figures")
            return best

    # --- measurements fed back by the engine -------------------------------------------------
    def record_step(self, n_tokens_in_batch: int, ms: float) -> None:
        with self._lock:
            if n_tokens_in_batch <= 1:
                self.target_step_ms.update(ms)
            else:
                extra = (ms - self.target_step_ms.value) / (n_tokens_in_batch - 1)
                self.verify_extra_ms.update(max(0.0, extra))

    def record_acceptance(self, method: str, proposed: int, accepted: int) -> None:
        if proposed > 0 and method in self.acceptance:
            with self._lock:
                self.acceptance[method].update(accepted / proposed)

    def record_draft(self, *, prompt_tokens: int = 0, prompt_ms: float = 0.0, tokens: int = 0,
                     token_ms: float = 0.0) -> None:
        with self._lock:
            if prompt_tokens > 8:
                self.draft_prompt_ms_per_token.update(prompt_ms / prompt_tokens)
            if tokens > 0:
                self.draft_token_ms.update(token_ms / tokens)

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return {
                "target_step_ms": self.target_step_ms.value,
                "verify_extra_ms": self.verify_extra_ms.value,
                "draft_token_ms": self.draft_token_ms.value,
                "acceptance_ngram": self.acceptance["ngram"].value,
                "acceptance_draft": self.acceptance["draft"].value,
            }
