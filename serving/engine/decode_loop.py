"""The CPU engine's decode loop (``LlamaEngine``'s base class): one request, from its file's sequence to its last chunk.

A request leases its file's sequence from the KV pool (or the disk tier) and keeps the prefix it holds; the rest
of its prompt is processed (a warm-up in small chunks that stop for a live request, a live prompt in chunks
between which it may give way with ``GaveWay``); then it decodes until a stop, each step verifying the draft
tokens (n-gram or draft model) in the same batch and accepting them greedily. A decoding request may give way
between two steps too: a long completion would otherwise hold the engine for tens of seconds on a CPU while a
colleague's keystroke waits. It resumes from its ``Decoding``: its sequence holds the prompt and the tokens
generated so far, so resuming costs one token's step (the next token's logits), or, where the pool gave the
sequence to another file meanwhile, processing again what it lost.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from serving.engine.generation import Decoding, GaveWay, GenerationChunk, GenerationFigures
from serving.engine.host_load import HostLoad
from serving.engine.kv_pool import KVPool, Slot, common_prefix
from serving.engine.llama_runner import LlamaRunner
from serving.engine.pool_disk import PoolDisk
from serving.engine.speculation import DraftModel, Ema, SpeculationChoice, SpeculationPolicy, ngram_proposal
from serving.engine.stop_text import StopText

log = logging.getLogger(__name__)

# Room kept in a sequence for draft tokens beyond max_tokens during verification.
MAX_DRAFT = 8
# A warm-up (max_tokens=0) processes its prompt in chunks this small and gives way to a live
# request between chunks: a live request waits at most one chunk (~0.5 s on 2 cores).
WARM_CHUNK = 32
# A live prompt that may give way to another request is processed in chunks this long: a request
# due earlier waits at most one chunk (~2 s on 2 cores). Measured here (1.5B Q4_K_M, an 855-token
# prompt, two rounds): 128-token chunks 18.9 / 17.0 s, 512-token ones 20.7 / 16.9 s, but 64-token
# ones 22.2 / 21.0 s: below 128 the matrix kernels lose width.
YIELD_CHUNK = 128
# While requests contend for the engine (one was waiting as another ran, in the last
# ``CONTENDED_WINDOW_S``: a colleague typing while another opens a file), a prompt takes smaller
# bites, so a keystroke waits ~0.7 s for the chunk in progress rather than ~2.5 s; they cost that
# prompt ~25 % more time (same measurement: 32-token chunks 23.2 / 22.8 s). A lone user, whose
# requests never overlap, keeps the wide chunks.
CONTENDED_YIELD_CHUNK = 32
CONTENDED_WINDOW_S = 10.0


@dataclass
class EngineStats:
    requests: int = 0
    speculation_by_method: dict[str, int] = field(default_factory=dict)
    draft_proposed: int = 0
    draft_accepted: int = 0
    gave_way: int = 0  # prompt chunks or decode steps after which a request stepped aside for another
    threads: int = 0  # the last request's threads generating tokens
    fewer_threads: int = 0  # requests that generated on fewer threads than cores: the host was busy


class DecodeLoop:
    """How ``LlamaEngine`` runs a request under its lock; the engine sets these attributes up."""

    target: LlamaRunner
    pool: KVPool
    disk: PoolDisk | None
    draft: DraftModel | None
    draft_disabled_reason: str | None
    policy: SpeculationPolicy
    stats: EngineStats
    host_load: HostLoad | None
    live_waiting: int
    prompt_ms_per_token: Ema
    _contended_at: float
    _rng: np.random.Generator

    def _disable_draft(self, reason: str) -> None:
        log.warning("speculation with the draft model is off: %s", reason)
        self.draft = None
        self.draft_disabled_reason = reason
        if hasattr(self, "policy"):
            self.policy.draft_available = False

    def _choose(self, mode: str, temperature: float, max_tokens: int, history: list[int]) -> SpeculationChoice:
        if temperature > 0 or max_tokens <= 1 or mode == "none":
            return SpeculationChoice("none", 0, 1.0, "off for this request")
        if mode == "ngram":
            return SpeculationChoice("ngram", 4, 0.0, "requested")
        if mode == "draft":
            if self.draft is None:
                return SpeculationChoice("ngram", 4, 0.0, "draft model unavailable: n-gram instead")
            return SpeculationChoice("draft", 3, 0.0, "requested")
        draft_prompt = len(history) - common_prefix(self.draft.tokens, history) if self.draft is not None else 0
        return self.policy.choose(max_tokens=max_tokens, draft_prompt_tokens=draft_prompt)

    def _generate_locked(
        self, tokens: list[int], max_tokens: int, temperature: float, stop: Sequence[str], cache_key: str | None,
        mode: str, give_way: Callable[[], bool] | None, carried: GaveWay | None,
    ) -> Iterator[GenerationChunk]:
        if not tokens:
            raise ValueError("empty prompt")
        self._set_threads()
        if carried is not None and carried.decoding is not None:
            yield from self._resume(tokens, max_tokens, temperature, cache_key, give_way, carried, carried.decoding)
            return
        figures = GenerationFigures(prompt_tokens=len(tokens))
        self.stats.requests += 1
        slot, reused = self._lease(tokens, max_tokens, cache_key, figures)
        # What an earlier attempt of this request processed is back as a prefix: not from cache.
        figures.cached_tokens = max(0, reused - (carried.processed if carried else 0))
        figures.gave_way = carried.times if carried else 0
        if max_tokens <= 0:  # a warm-up: fill the file's KV, never delay a live request
            self._warm_up(slot, tokens[reused:], figures)
            yield GenerationChunk(text="", figures=figures, final=True)
            return
        pending = self._process_prompt(slot, tokens[reused:], temperature, give_way, carried, figures)
        choice = self._choose(mode, temperature, max_tokens, tokens)
        figures.speculation = choice.method
        self.stats.speculation_by_method[choice.method] = self.stats.speculation_by_method.get(choice.method, 0) + 1
        yield from self._decode(slot, tokens, pending, max_tokens, temperature, give_way,
                                Decoding(StopText(stop), choice, figures))

    def _resume(self, tokens: list[int], max_tokens: int, temperature: float, cache_key: str | None,
                give_way: Callable[[], bool] | None, carried: GaveWay, state: Decoding) -> Iterator[GenerationChunk]:
        """Go on decoding a request that gave way: its sequence gives back the prompt and the tokens generated
        so far (all but the last, whose step gives the next token's logits, or more where it was evicted)."""
        figures = state.figures
        figures.gave_way = carried.times
        history = tokens + state.generated
        slot, reused = self._lease(history, max_tokens - len(state.generated), cache_key,
                                   GenerationFigures())  # already counted as processed: not cached again
        try:
            pending = self._process_prompt(slot, history[reused:], temperature, give_way, None, GenerationFigures())
        except GaveWay:
            raise GaveWay(carried.processed, carried.prompt_ms, carried.times + 1, state) from None
        yield from self._decode(slot, tokens, pending, max_tokens, temperature, give_way, state)

    def _lease(self, tokens: list[int], max_tokens: int, cache_key: str | None,
               figures: GenerationFigures) -> tuple[Slot, int]:
        """The file's sequence, holding the longest prefix of the prompt it can give back (from the
        pool, or from the disk tier when that gives more); returns it and that prefix's length."""
        lease = self.pool.lease(cache_key, tokens, room=max_tokens + MAX_DRAFT + 1)
        figures.evicted = len(lease.evicted)
        if lease.evicted:
            log.info("KV pool evicted %s for %s", ", ".join(lease.evicted), cache_key or "an unkeyed prompt")
        slot, seq = lease.slot, lease.slot.seq_id
        if lease.displaced is not None and self.disk is not None:
            self.disk.keep(*lease.displaced, seq=seq)
        reused = (lease.reused if self.disk is None
                  else self.disk.restore(cache_key, tokens, slot, lease.reused, figures))
        self.target.remove(seq, reused)
        slot.tokens = tokens[:reused]
        return slot, reused

    def _warm_up(self, slot: Slot, rest: list[int], figures: GenerationFigures) -> None:
        """Process the rest of a prompt in small chunks, stopping as soon as a live request waits."""
        started = time.perf_counter()
        for i in range(0, len(rest), WARM_CHUNK):
            if self.live_waiting > 0:
                figures.finish_reason = "preempted"
                break
            self._decode_into(slot, rest[i:i + WARM_CHUNK], all_logits=False)
        else:
            figures.finish_reason = "length"
        figures.prompt_ms = (time.perf_counter() - started) * 1000
        figures.kv_bytes = self.target.seq_bytes(slot.seq_id)

    def _process_prompt(self, slot: Slot, rest: list[int], temperature: float, give_way: Callable[[], bool] | None,
                        carried: GaveWay | None, figures: GenerationFigures) -> int:
        """Process the rest of a live prompt, in chunks between which it may give way (``GaveWay``);
        returns the completion's first token."""
        r = self.target
        started = time.perf_counter()
        i = 0
        while i < len(rest):
            if i and give_way is not None and give_way():
                self.stats.gave_way += 1
                self._contended_at = time.monotonic()
                spent = (time.perf_counter() - started) * 1000
                raise GaveWay(i + (carried.processed if carried else 0),
                              spent + (carried.prompt_ms if carried else 0.0), figures.gave_way + 1)
            step = len(rest) if give_way is None else self._yield_chunk()
            self._decode_into(slot, rest[i:i + step], all_logits=False)
            i += step
        pending = r.argmax(-1) if temperature <= 0 else r.sample(-1, temperature, self._rng)
        figures.prompt_ms = (time.perf_counter() - started) * 1000
        if len(rest) >= YIELD_CHUNK:
            self.prompt_ms_per_token.update(figures.prompt_ms / len(rest))
        figures.prompt_ms += carried.prompt_ms if carried else 0.0
        return pending

    def _decode(self, slot: Slot, tokens: list[int], pending: int, max_tokens: int, temperature: float,
                give_way: Callable[[], bool] | None, state: Decoding) -> Iterator[GenerationChunk]:
        """Decode from ``pending`` (the token after the prompt ``tokens`` and ``state.generated``) until a stop,
        streaming the text; when speculating, each step verifies the draft tokens in the same batch. Between two
        steps it may give way (``GaveWay`` carrying ``state``)."""
        r = self.target
        figures, choice, generated, text = state.figures, state.choice, state.generated, state.text
        t_decode = time.perf_counter()

        def emit(tok: int) -> bool:
            """Append one token; True when generation must end."""
            if r.is_eog(tok):
                figures.finish_reason = "stop"
                return True
            generated.append(tok)
            if text.feed(r.token_bytes(tok)):
                figures.finish_reason = "stop"
                return True
            if len(generated) >= max_tokens:
                figures.finish_reason = "length"
                return True
            return False

        done = False
        steps = 0  # at least one in each run, so a request that runs again always gets on
        while not done:
            if steps and give_way is not None and give_way():
                self.stats.gave_way += 1
                self._contended_at = time.monotonic()
                state.decode_ms += (time.perf_counter() - t_decode) * 1000
                raise GaveWay(figures.prompt_tokens - figures.cached_tokens, figures.prompt_ms,
                              figures.gave_way + 1, state)
            steps += 1
            if emit(pending):
                break
            if (out := text.take()):
                yield GenerationChunk(text=out, figures=figures)
            drafts = self._propose(choice, tokens, generated, max_tokens - len(generated), figures)
            batch = [pending, *drafts]
            pos = len(slot.tokens)
            t_step = time.perf_counter()
            self._decode_into(slot, batch, all_logits=bool(drafts))
            self.policy.record_step(len(batch), (time.perf_counter() - t_step) * 1000)
            if temperature > 0:
                pending = r.sample(-1, temperature, self._rng)
                continue
            if not drafts:
                pending = r.argmax(-1)
                continue
            accepted, pending = self._accept(slot, pos, drafts, choice, figures)
            for d in drafts[:accepted]:
                if emit(d):
                    done = True
                    break
        if (out := text.take(final=True)):
            yield GenerationChunk(text=out, figures=figures)
        figures.completion_tokens = len(generated)
        figures.token_ids = list(generated)
        figures.decode_ms = state.decode_ms + (time.perf_counter() - t_decode) * 1000
        figures.kv_bytes = r.seq_bytes(slot.seq_id)
        self.stats.draft_proposed += figures.draft_proposed
        self.stats.draft_accepted += figures.draft_accepted
        yield GenerationChunk(text="", figures=figures, final=True)

    def _accept(self, slot: Slot, pos: int, drafts: list[int], choice: SpeculationChoice,
                figures: GenerationFigures) -> tuple[int, int]:
        """Greedy acceptance of the draft tokens just decoded after the token at ``pos``: the sequence
        keeps the accepted ones; returns how many, and the target's own token after them."""
        r = self.target
        accepted = next((i for i, d in enumerate(drafts) if r.argmax(i) != d), len(drafts))
        correction = r.argmax(accepted)
        keep = pos + 1 + accepted
        r.remove(slot.seq_id, keep)
        del slot.tokens[keep:]
        figures.draft_proposed += len(drafts)
        figures.draft_accepted += accepted
        self.policy.record_acceptance(choice.method, len(drafts), accepted)
        return accepted, correction

    def _set_threads(self) -> None:
        """Adaptive threads: generation leaves a core to each that other processes at the engine's priority keep
        busy; prompts keep every core (serving.engine.host_load says why)."""
        if self.host_load is None:
            self.stats.threads = self.target.n_threads
            return
        cores = os.cpu_count() or 1
        threads = self.host_load.threads(cores)
        self.target.set_threads(threads, cores)
        if self.draft is not None:
            self.draft.runner.set_threads(threads, cores)
        self.stats.threads = threads
        self.stats.fewer_threads += threads < cores

    def _yield_chunk(self) -> int:
        """Tokens to process before asking again whether to give way (narrow under contention)."""
        if self.live_waiting > 0:
            self._contended_at = time.monotonic()
        contended = time.monotonic() - self._contended_at < CONTENDED_WINDOW_S
        return CONTENDED_YIELD_CHUNK if contended else YIELD_CHUNK

    def _decode_into(self, slot: Slot, tokens: Sequence[int], *, all_logits: bool) -> None:
        self.target.decode(slot.seq_id, tokens, len(slot.tokens), all_logits=all_logits)
        slot.tokens.extend(tokens)

    def _propose(self, choice: SpeculationChoice, prompt: list[int], generated: list[int], left: int,
                 figures: GenerationFigures) -> list[int]:
        k = min(choice.k, left - 1, MAX_DRAFT)
        if choice.method == "none" or k <= 0:
            return []
        history = prompt + generated
        if choice.method == "ngram" or self.draft is None:
            return ngram_proposal(history, k)
        try:
            drafts, processed, prompt_ms, token_ms = self.draft.propose(history, k)
        except Exception as exc:  # a misbehaving draft turns itself off; this request goes on without
            self._disable_draft(f"draft model failed during a request: {exc}")
            return []
        self.policy.record_draft(prompt_tokens=processed, prompt_ms=prompt_ms, tokens=len(drafts), token_ms=token_ms)
        return drafts
