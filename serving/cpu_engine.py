"""The embedded CPU engine: llama.cpp (llama-cpp-python's low-level API) on a GGUF code model.

Our own decode loop rather than ``Llama.create_completion``, for three things the high-level
API cannot do together:

- **a file-level KV pool**: one context holds several sequences (``n_seq_max``, one KV stream
  each), one per recently used file (``serving.kv_pool``); a request goes back to its file's
  sequence and only the tokens after the common prefix are processed;
- **speculative decoding verified in one batch**: draft tokens (n-gram lookup or a draft model,
  ``serving.speculation``) are decoded with logits at every position in the same batch, and
  accepted greedily, so the output is exactly the target's greedy decoding; logits are asked for
  only in verification batches, never during prompt processing (llama-cpp-python's own draft
  support needs ``logits_all``, which slows every prompt down);
- **an INT8 (or INT4) KV cache** per model instance: llama.cpp's ``q8_0``/``q4_0`` for K and V
  (a quantised V needs flash attention, which is switched on with it).

Requests are served one at a time (the lock); figures per request (prompt tokens, tokens reused
from the pool, draft tokens proposed/accepted, timings, KV bytes of the sequence) go back to
Triton's caller with the last chunk. A request's prompt processing can give way between chunks
to a request due before it (``give_way``, asked by the latency-first admission): it stops with
``GaveWay``, keeping the KV it has processed in its file's sequence, and when it runs again the
pool hands that back as a common prefix, so nothing is processed twice.
"""

from __future__ import annotations

import codecs
import ctypes
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from serving.fim import TEMPLATE_MARKERS
from serving.kv_disk import KVDiskTier
from serving.kv_pool import KVPool, common_prefix
from serving.speculation import Ema, SpeculationChoice, SpeculationPolicy, ngram_proposal

log = logging.getLogger(__name__)

KV_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2}  # ggml type ids (GGML_TYPE_F16, _Q8_0, _Q4_0)
SPECULATION_MODES = ("auto", "none", "ngram", "draft")
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
# A file's KV goes to disk, and comes back from it, only when it saves this many prompt tokens; at
# most this many evicted files wait for the writer (beyond, an eviction is not kept).
DISK_MIN_TOKENS = 64
DISK_MAX_PENDING = 2
# Priors of the measured rates a request's expected service time is estimated from.
PRIOR_PROMPT_MS_PER_TOKEN = 16.0


class GaveWay(Exception):
    """Prompt processing stopped between chunks for a request due earlier; the KV processed so
    far stays in the file's sequence. Handed back as ``carried`` when the request runs again:
    ``processed`` prompt tokens and ``prompt_ms`` over its attempts so far, ``times`` it gave way."""

    def __init__(self, processed: int, prompt_ms: float, times: int) -> None:
        super().__init__(f"gave way after {processed} prompt tokens")
        self.processed = processed
        self.prompt_ms = prompt_ms
        self.times = times


@dataclass
class GenerationFigures:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    draft_proposed: int = 0
    draft_accepted: int = 0
    draft_steps: int = 0
    speculation: str = "none"
    finish_reason: str = "stop"
    prompt_ms: float = 0.0
    decode_ms: float = 0.0
    kv_bytes: int = 0
    evicted: int = 0
    gave_way: int = 0  # times its prompt processing stepped aside for a request due earlier
    restored_tokens: int = 0  # of cached_tokens, read back from the disk tier
    restore_ms: float = 0.0
    token_ids: list[int] = field(default_factory=list)  # the completion's tokens (for verification)


@dataclass
class GenerationChunk:
    text: str
    figures: GenerationFigures
    final: bool = False


@dataclass
class EngineConfig:
    model_path: Path
    n_ctx: int = 4096  # KV cells per sequence: the longest prompt + completion one file may have
    n_threads: int = 0
    n_batch: int = 512
    kv_type: str = "f16"  # "f16" | "q8_0" | "q4_0"
    n_slots: int = 4  # files whose KV is kept at once
    draft_model_path: Path | None = None
    draft_n_ctx: int = 4096
    speculation: str = "auto"  # default per request: "auto" | "none" | "ngram" | "draft"
    kv_disk_dir: Path | None = None  # the pool's disk tier (None: off)
    kv_disk_budget_bytes: int = 0


class _Runner:
    """One llama.cpp model + context + batch: decode tokens into a sequence, read logits."""

    def __init__(self, model_path: Path, *, n_ctx: int, n_slots: int, n_threads: int, n_batch: int,
                 kv_type: str) -> None:
        from llama_cpp import llama_cpp as C  # heavy import, only in the serving process
        from llama_cpp._internals import LlamaBatch, LlamaContext, LlamaModel
        from llama_cpp._utils import suppress_stdout_stderr

        if kv_type not in KV_TYPES:
            raise ValueError(f"unknown KV cache type {kv_type!r}; choose one of {', '.join(KV_TYPES)}")
        self._C = C
        mparams = C.llama_model_default_params()
        self.model = LlamaModel(path_model=str(model_path), params=mparams, verbose=False)
        cparams = C.llama_context_default_params()
        cparams.n_ctx = n_ctx * n_slots
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_threads = n_threads
        cparams.n_threads_batch = n_threads
        cparams.n_seq_max = n_slots
        # One KV stream per sequence: a sequence's attention spans only its own cells.
        cparams.kv_unified = False
        cparams.type_k = KV_TYPES[kv_type]
        cparams.type_v = KV_TYPES[kv_type]
        # A quantised V cache needs flash attention in llama.cpp.
        cparams.flash_attn_type = (C.LLAMA_FLASH_ATTN_TYPE_ENABLED if kv_type != "f16"
                                   else C.LLAMA_FLASH_ATTN_TYPE_AUTO)
        with suppress_stdout_stderr(disable=False):  # llama.cpp prints its context set-up otherwise
            self.ctx = LlamaContext(model=self.model, params=cparams, verbose=False)
        self.batch = LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=1, verbose=False)
        self.n_batch = n_batch
        self.n_ctx = n_ctx
        self.n_vocab = self.model.n_vocab()
        self.vocab = self.model.vocab
        self.kv_type = kv_type
        self._piece = ctypes.create_string_buffer(256)

    def tokenize(self, text: str, markers: Sequence[int] | None = None) -> list[int]:
        """``markers``: offsets of the template's special tokens (serving.fim.TEMPLATE_MARKERS); the rest is
        text, never parsed for special tokens. None: the whole of ``text`` is (a caller that built it all)."""
        if markers is None:
            return self.model.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        tokens: list[int] = []
        done = 0
        for at in sorted(m for m in markers if m >= 0):
            marker = next((m for m in TEMPLATE_MARKERS if text.startswith(m, at)), None)
            if marker is None or at < done:
                raise ValueError(f"no template marker at offset {at} of the prompt")
            if at > done:
                tokens += self.model.tokenize(text[done:at].encode("utf-8"), add_bos=False, special=False)
            tokens += self.model.tokenize(marker.encode("utf-8"), add_bos=False, special=True)
            done = at + len(marker)
        if done < len(text):
            tokens += self.model.tokenize(text[done:].encode("utf-8"), add_bos=False, special=False)
        return tokens

    def token_bytes(self, token: int) -> bytes:
        n = self._C.llama_token_to_piece(self.vocab, token, self._piece, len(self._piece), 0, False)
        return self._piece.raw[:n] if n > 0 else b""

    def is_eog(self, token: int) -> bool:
        return bool(self._C.llama_vocab_is_eog(self.vocab, token))

    def remove(self, seq: int, from_pos: int) -> None:
        """Forget the sequence's KV from ``from_pos`` on (-1 end: to the end)."""
        self._C.llama_memory_seq_rm(self.ctx.memory, seq, from_pos, -1)

    def decode(self, seq: int, tokens: Sequence[int], pos0: int, *, all_logits: bool) -> None:
        """Decode ``tokens`` at positions pos0.. of ``seq``; logits for the last token, or for all
        of them (verification: then ``len(tokens)`` must fit one batch)."""
        if all_logits and len(tokens) > self.n_batch:
            raise ValueError("a verification batch larger than n_batch")
        b = self.batch.batch
        for start in range(0, len(tokens), self.n_batch):
            part = tokens[start:start + self.n_batch]
            b.n_tokens = len(part)
            for i, tok in enumerate(part):
                b.token[i] = tok
                b.pos[i] = pos0 + start + i
                b.seq_id[i][0] = seq
                b.n_seq_id[i] = 1
                b.logits[i] = all_logits
            b.logits[len(part) - 1] = True
            self.ctx.decode(self.batch)

    def logits(self, i: int) -> np.ndarray:
        """Logits after position ``i`` of the last batch (-1: its last token); a view, not a copy."""
        return np.ctypeslib.as_array(self._C.llama_get_logits_ith(self.ctx.ctx, i), shape=(self.n_vocab,))

    def argmax(self, i: int) -> int:
        """Greedy token after position ``i`` of the last batch."""
        return int(self.logits(i).argmax())

    def sample(self, i: int, temperature: float, rng: np.random.Generator, top_k: int = 40) -> int:
        logits = self.logits(i)
        top = np.argpartition(logits, -top_k)[-top_k:]
        z = logits[top] / max(temperature, 1e-5)
        p = np.exp(z - z.max())
        return int(top[rng.choice(len(top), p=p / p.sum())])

    def seq_bytes(self, seq: int) -> int:
        """Bytes of the sequence's state (its KV cells): the KV memory of one file's context."""
        return int(self._C.llama_state_seq_get_size(self.ctx.ctx, seq))

    def seq_state(self, seq: int) -> bytes:
        """A copy of the sequence's state (what ``set_seq_state`` puts back)."""
        size = self.seq_bytes(seq)
        buffer = (ctypes.c_uint8 * size)()
        written = int(self._C.llama_state_seq_get_data(self.ctx.ctx, buffer, size, seq))
        return ctypes.string_at(buffer, written)

    def set_seq_state(self, seq: int, state: bytes) -> bool:
        """Replace the sequence's KV with a saved state; False when llama.cpp refuses it (the
        sequence is then empty)."""
        self.remove(seq, 0)
        buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if int(self._C.llama_state_seq_set_data(self.ctx.ctx, buffer, len(state), seq)) == 0:
            self.remove(seq, 0)
            return False
        return True


class _DraftModel:
    """A smaller model proposing k greedy tokens; keeps the KV of the last history it saw."""

    def __init__(self, runner: _Runner) -> None:
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


@dataclass
class EngineStats:
    requests: int = 0
    draft_failures: int = 0
    speculation_by_method: dict[str, int] = field(default_factory=dict)
    draft_proposed: int = 0
    draft_accepted: int = 0
    gave_way: int = 0  # prompt processings that stepped aside for a request due earlier


class LlamaEngine:
    def __init__(self, config: EngineConfig) -> None:
        if config.speculation not in SPECULATION_MODES:
            raise ValueError(f"unknown speculation mode {config.speculation!r}")
        threads = config.n_threads or os.cpu_count() or 1
        self.config = config
        self.model_name = config.model_path.stem
        self._lock = threading.Lock()
        # Live requests waiting for the engine (incremented by the server before queueing one);
        # a warm-up stops at its next chunk when this is above zero.
        self.live_waiting = 0
        self._rng = np.random.default_rng(0)
        self.target = _Runner(config.model_path, n_ctx=config.n_ctx, n_slots=config.n_slots, n_threads=threads,
                              n_batch=config.n_batch, kv_type=config.kv_type)
        self.pool = KVPool(config.n_slots, config.n_ctx)
        self.disk: KVDiskTier | None = None
        if config.kv_disk_dir is not None and config.kv_disk_budget_bytes > 0:
            self.disk = KVDiskTier(config.kv_disk_dir, config.kv_disk_budget_bytes, self._kv_fingerprint())
        # one writer: an evicted file's KV is copied out on the engine thread, written beside it
        self._disk_writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kv-disk")
        self._disk_write_slots = threading.BoundedSemaphore(DISK_MAX_PENDING)
        self.stats = EngineStats()
        self.prompt_ms_per_token = Ema(PRIOR_PROMPT_MS_PER_TOKEN)
        self._contended_at = -math.inf  # when a live request last waited while another ran
        self.draft: _DraftModel | None = None
        self.draft_disabled_reason: str | None = None
        if config.draft_model_path is not None:
            try:
                self.draft = _DraftModel(_Runner(config.draft_model_path, n_ctx=config.draft_n_ctx, n_slots=1,
                                                 n_threads=threads, n_batch=config.n_batch, kv_type=config.kv_type))
                if self.draft.runner.n_vocab != self.target.n_vocab:
                    raise ValueError(f"draft vocabulary {self.draft.runner.n_vocab} != target {self.target.n_vocab}")
            except Exception as exc:  # a draft model is optional: degrade to n-gram/no speculation
                self._disable_draft(f"draft model failed to load: {exc}")
        self.policy = SpeculationPolicy(draft_available=self.draft is not None)

    def _kv_fingerprint(self) -> str:
        """What a saved KV state is valid for: this model file, KV cell type and llama.cpp build."""
        import llama_cpp

        path = self.config.model_path
        return f"{path.name}:{path.stat().st_size}:{self.config.kv_type}:{llama_cpp.__version__}"

    def _keep_on_disk(self, key: str, tokens: list[int], seq: int) -> None:
        """Copy the sequence's KV now (before it is trimmed) and write it on the writer thread."""
        if self.disk is None or key.startswith("<") or len(tokens) < DISK_MIN_TOKENS:
            return
        if not self._disk_write_slots.acquire(blocking=False):
            log.info("KV of %s not kept on disk: %d writes pending already", key, DISK_MAX_PENDING)
            return
        state = self.target.seq_state(seq)
        disk = self.disk

        def write() -> None:
            try:
                disk.save(key, tokens, state)
            finally:
                self._disk_write_slots.release()

        self._disk_writer.submit(write)

    def _restore_from_disk(self, key: str | None, tokens: list[int], slot: Any, reused: int,
                           figures: GenerationFigures) -> int:
        """Read the file's KV back from disk when it gives more of the prompt than the slot
        holds now; returns the prompt tokens the slot gives back."""
        if self.disk is None or key is None or key.startswith("<"):
            return reused
        if len(tokens) - 1 < reused + DISK_MIN_TOKENS:  # the slot holds nearly all of it: no file to read
            return reused
        stored_tokens = self.disk.tokens_of(key)
        if stored_tokens is None or KVPool.reusable(stored_tokens, tokens) < reused + DISK_MIN_TOKENS:
            return reused
        started = time.perf_counter()
        stored = self.disk.load(key)
        if stored is None:
            return reused
        if not self.target.set_seq_state(slot.seq_id, stored.blob):
            self.disk.discard(key, "llama.cpp did not accept the saved state")
            slot.tokens = []
            return 0
        slot.tokens = list(stored.tokens)
        gained = KVPool.reusable(stored.tokens, tokens)
        figures.restored_tokens = gained
        figures.restore_ms = (time.perf_counter() - started) * 1000
        self.disk.restored(gained)
        return gained

    def disk_writes_done(self) -> None:
        """Wait until the evicted files queued for the disk tier are written."""
        self._disk_writer.submit(lambda: None).result()

    def save_pool(self) -> int:
        """Keep every file's KV on disk (at shutdown); returns the files written."""
        if self.disk is None:
            return 0
        written = 0
        with self._lock:
            for slot in self.pool.slots:
                if slot.key and not slot.key.startswith("<") and len(slot.tokens) >= DISK_MIN_TOKENS:
                    self.disk.save(slot.key, list(slot.tokens), self.target.seq_state(slot.seq_id))
                    written += 1
        self.disk_writes_done()
        return written

    def _disable_draft(self, reason: str) -> None:
        log.warning("speculation with the draft model is off: %s", reason)
        self.draft = None
        self.draft_disabled_reason = reason
        self.stats.draft_failures += 1
        if hasattr(self, "policy"):
            self.policy.draft_available = False

    def tokenize(self, text: str, markers: Sequence[int] | None = None) -> list[int]:
        return self.target.tokenize(text, markers)

    def top2_margin(self, prompt: str, continuation: Sequence[int]) -> float:
        """Logit gap between the target's two best next tokens after ``prompt`` + ``continuation``,
        decoded one token at a time as plain decoding does (how close to a tie greedy was there)."""
        with self._lock:
            tokens, cont = self.tokenize(prompt), list(continuation)
            lease = self.pool.lease("<margin-check>", tokens + cont, room=1)
            r, slot = self.target, lease.slot
            keep = min(lease.reused, len(tokens) - 1)
            r.remove(slot.seq_id, keep)
            slot.tokens = tokens[:keep]
            self._decode_into(slot, tokens[keep:], all_logits=False)
            for tok in cont:
                self._decode_into(slot, [tok], all_logits=False)
            best = np.partition(r.logits(-1), -2)[-2:]
            return float(abs(best[1] - best[0]))

    def status(self) -> dict[str, Any]:
        """For `ctxpress status` and the metrics: pool occupancy, speculation, degradations."""
        return {
            "kv_type": self.config.kv_type,
            "kv_cells": self.pool.cells_per_slot * len(self.pool.slots),
            "kv_cells_used": self.pool.used_cells(),
            "kv_slots": [{"key": s.key, "tokens": len(s.tokens)} for s in self.pool.slots if s.tokens],
            "pool": vars(self.pool.stats),
            "disk": self._disk_status(),
            "draft_model": self.config.draft_model_path.name if self.draft is not None and
            self.config.draft_model_path else None,
            "draft_disabled_reason": self.draft_disabled_reason,
            "speculation": dict(self.stats.speculation_by_method),
            "draft_proposed": self.stats.draft_proposed,
            "draft_accepted": self.stats.draft_accepted,
            "gave_way": self.stats.gave_way,
            "prompt_ms_per_token": round(self.prompt_ms_per_token.value, 2),
            "policy": self.policy.snapshot(),
        }

    def _disk_status(self) -> dict[str, Any] | None:
        if self.disk is None:
            return None
        files, size = self.disk.usage()
        return {**vars(self.disk.stats), "files": files, "bytes": size, "budget_bytes": self.disk.budget_bytes}

    def generate(
        self,
        prompt: str,
        *,
        max_tokens: int,
        temperature: float = 0.0,
        stop: Sequence[str] = (),
        cache_key: str | None = None,
        speculation: str | None = None,
        give_way: Callable[[], bool] | None = None,
        carried: GaveWay | None = None,
        tokens: list[int] | None = None,
        markers: Sequence[int] | None = None,
    ) -> Iterator[GenerationChunk]:
        """Stream the completion; the last chunk has ``final=True`` and the full figures.

        ``cache_key``: the file this prompt belongs to (repository + path + model), for the KV
        pool; None shares slots by longest prefix. ``speculation``: "auto" (the policy),
        "none", "ngram" or "draft"; None is the engine's default. Greedy (temperature 0) output
        does not depend on it. ``give_way``: asked between chunks of prompt processing; True
        stops it with ``GaveWay`` (before any text). ``carried``: the ``GaveWay`` of this
        request's earlier attempt (its tokens are counted as processed, not as cached).
        ``tokens``: ``prompt`` already tokenized (by a caller that estimated its cost). ``markers``: where
        the template's special tokens are (``tokenize``); None parses the whole prompt for them.
        """
        mode = speculation or self.config.speculation
        if mode not in SPECULATION_MODES:
            raise ValueError(f"unknown speculation mode {mode!r}")
        with self._lock:
            yield from self._generate_locked(self.tokenize(prompt, markers) if tokens is None else tokens, max_tokens,
                                             temperature, stop, cache_key, mode, give_way, carried)

    def expected_ms(self, tokens: Sequence[int], cache_key: str | None, max_tokens: int) -> float:
        """Expected service time of a request at the rates measured so far: the prompt tokens its
        file's sequence does not hold yet, and ``max_tokens`` decode steps. Safe to call from
        another thread while the engine runs (it reads the pool without changing it)."""
        uncached = len(tokens) - self.pool.peek(cache_key, tokens)
        return uncached * self.prompt_ms_per_token.value + max(max_tokens, 0) * self.policy.target_step_ms.value

    def prefill(self, prompt: str, cache_key: str | None) -> GenerationFigures:
        """Process a prompt into the pool without generating (pre-warming a file's stable part)."""
        chunks = list(self.generate(prompt, max_tokens=0, cache_key=cache_key, speculation="none"))
        return chunks[-1].figures

    # --- the decode loop ---------------------------------------------------------------------
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
        r = self.target
        if not tokens:
            raise ValueError("empty prompt")
        figures = GenerationFigures(prompt_tokens=len(tokens))
        self.stats.requests += 1
        lease = self.pool.lease(cache_key, tokens, room=max_tokens + MAX_DRAFT + 1)
        figures.evicted = len(lease.evicted)
        if lease.evicted:
            log.info("KV pool evicted %s for %s", ", ".join(lease.evicted), cache_key or "an unkeyed prompt")
        slot, seq = lease.slot, lease.slot.seq_id
        if lease.displaced is not None:
            self._keep_on_disk(*lease.displaced, seq=seq)
        reused = self._restore_from_disk(cache_key, tokens, slot, lease.reused, figures)
        # What an earlier attempt of this request processed is back as a prefix: not from cache.
        figures.cached_tokens = max(0, reused - (carried.processed if carried else 0))
        figures.gave_way = carried.times if carried else 0
        r.remove(seq, reused)
        slot.tokens = tokens[:reused]
        started = time.perf_counter()
        if max_tokens <= 0:  # a warm-up: fill the file's KV, never delay a live request
            rest = tokens[reused:]
            for i in range(0, len(rest), WARM_CHUNK):
                if self.live_waiting > 0:
                    figures.finish_reason = "preempted"
                    break
                self._decode_into(slot, rest[i:i + WARM_CHUNK], all_logits=False)
            else:
                figures.finish_reason = "length"
            figures.prompt_ms = (time.perf_counter() - started) * 1000
            figures.kv_bytes = r.seq_bytes(seq)
            yield GenerationChunk(text="", figures=figures, final=True)
            return
        rest = tokens[reused:]
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

        choice = self._choose(mode, temperature, max_tokens, tokens)
        figures.speculation = choice.method
        self.stats.speculation_by_method[choice.method] = self.stats.speculation_by_method.get(choice.method, 0) + 1
        generated: list[int] = []
        text = _StopText(stop)
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
        while not done:
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
            accepted = 0
            for i, d in enumerate(drafts):
                if r.argmax(i) != d:
                    break
                accepted += 1
            correction = r.argmax(accepted)
            keep = pos + 1 + accepted
            r.remove(seq, keep)
            del slot.tokens[keep:]
            figures.draft_proposed += len(drafts)
            figures.draft_accepted += accepted
            figures.draft_steps += 1
            self.policy.record_acceptance(choice.method, len(drafts), accepted)
            for d in drafts[:accepted]:
                if emit(d):
                    done = True
                    break
            pending = correction
        if (out := text.take(final=True)):
            yield GenerationChunk(text=out, figures=figures)
        figures.completion_tokens = len(generated)
        figures.token_ids = list(generated)
        figures.decode_ms = (time.perf_counter() - t_decode) * 1000
        figures.kv_bytes = r.seq_bytes(seq)
        self.stats.draft_proposed += figures.draft_proposed
        self.stats.draft_accepted += figures.draft_accepted
        yield GenerationChunk(text="", figures=figures, final=True)

    def _yield_chunk(self) -> int:
        """Tokens to process before asking again whether to give way (narrow under contention)."""
        if self.live_waiting > 0:
            self._contended_at = time.monotonic()
        contended = time.monotonic() - self._contended_at < CONTENDED_WINDOW_S
        return CONTENDED_YIELD_CHUNK if contended else YIELD_CHUNK

    def _decode_into(self, slot: Any, tokens: Sequence[int], *, all_logits: bool) -> None:
        self.target.decode(slot.seq_id, tokens, len(slot.tokens), all_logits=all_logits)
        slot.tokens.extend(tokens)

    def _propose(self, choice: SpeculationChoice, prompt: list[int], generated: list[int], left: int,
                 figures: GenerationFigures) -> list[int]:
        k = min(choice.k, left - 1, MAX_DRAFT)
        if choice.method == "none" or k <= 0:
            return []
        history = prompt + generated
        if choice.method == "ngram":
            return ngram_proposal(history, k)
        if self.draft is None:
            return ngram_proposal(history, k)
        try:
            drafts, processed, prompt_ms, token_ms = self.draft.propose(history, k)
        except Exception as exc:  # a misbehaving draft turns itself off; this request goes on without
            self._disable_draft(f"draft model failed during a request: {exc}")
            return []
        self.policy.record_draft(prompt_tokens=processed, prompt_ms=prompt_ms, tokens=len(drafts), token_ms=token_ms)
        return drafts


class _StopText:
    """Incremental UTF-8 decoding with stop strings: text is released only once no stop string
    can still start in it."""

    def __init__(self, stop: Sequence[str]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in stop if s]
        self._hold = max((len(s) for s in self._stop), default=1) - 1
        self._text = ""
        self._released = 0
        self.stopped = False

    def feed(self, data: bytes) -> bool:
        self._text += self._decoder.decode(data)
        for s in self._stop:
            at = self._text.find(s, max(0, self._released - len(s)))
            if at != -1:
                self._text = self._text[:at]
                self.stopped = True
                return True
        return False

    def take(self, final: bool = False) -> str:
        if final and not self.stopped:
            self._text += self._decoder.decode(b"", final=True)
        end = len(self._text) if (final or self.stopped) else max(self._released, len(self._text) - self._hold)
        out = self._text[self._released:end]
        self._released = end
        return out
