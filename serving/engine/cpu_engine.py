"""The embedded CPU engine: llama.cpp (llama-cpp-python's low-level API) on a GGUF code model.

Our own decode loop rather than ``Llama.create_completion``, for three things the high-level
API cannot do together:

- **a file-level KV pool**: one context holds several sequences (``n_seq_max``, one KV stream
  each), one per recently used file (``serving.engine.kv_pool``, with its disk tier: ``serving.engine.pool_disk``);
  a request goes back to its file's sequence and only the tokens after the common prefix are processed;
- **speculative decoding verified in one batch**: draft tokens (n-gram lookup or a draft model,
  ``serving.engine.speculation``) are decoded with logits at every position in the same batch, and
  accepted greedily, so the output is exactly the target's greedy decoding; logits are asked for
  only in verification batches, never during prompt processing (llama-cpp-python's own draft
  support needs ``logits_all``, which slows every prompt down);
- **an INT8 (or INT4) KV cache** per model instance: llama.cpp's ``q8_0``/``q4_0`` for K and V
  (a quantised V needs flash attention, which is switched on with it; ``serving.engine.llama_runner``).

Requests are served one at a time (the lock); figures per request (prompt tokens, tokens reused
from the pool, draft tokens proposed/accepted, timings, KV bytes of the sequence) go back to
Triton's caller with the last chunk. A request's prompt processing can give way between chunks
to a request due before it (``give_way``, asked by the latency-first admission): it stops with
``GaveWay``, keeping the KV it has processed in its file's sequence, and when it runs again the
pool hands that back as a common prefix, so nothing is processed twice. The loop itself:
``serving.engine.decode_loop``.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from serving.engine.decode_loop import DecodeLoop, EngineStats
from serving.engine.engine_config import SPECULATION_MODES, EngineConfig
from serving.engine.generation import GaveWay, GenerationChunk
from serving.engine.host_load import HostLoad
from serving.engine.kv_disk import KVDiskTier
from serving.engine.kv_pool import KVPool
from serving.engine.llama_runner import LlamaRunner
from serving.engine.pool_disk import PoolDisk, kv_fingerprint
from serving.engine.speculation import DraftModel, Ema, SpeculationPolicy

log = logging.getLogger(__name__)

# Priors of the measured rates a request's expected service time is estimated from.
PRIOR_PROMPT_MS_PER_TOKEN = 16.0


class LlamaEngine(DecodeLoop):
    """The target model's runner, the KV pool over its sequences (with its disk tier), the draft model
    and the speculation policy; one request at a time."""

    def __init__(self, config: EngineConfig) -> None:
        if config.speculation not in SPECULATION_MODES:
            raise ValueError(f"unknown speculation mode {config.speculation!r}")
        # 0: adaptive, set before each request from what other processes use (serving.engine.host_load)
        self.host_load = HostLoad().start() if config.n_threads == 0 else None
        threads = config.n_threads or os.cpu_count() or 1
        self.config = config
        self.model_name = config.model_path.stem
        self._lock = threading.Lock()
        # Live requests waiting for the engine (incremented by the server before queueing one);
        # a warm-up stops at its next chunk when this is above zero.
        self.live_waiting = 0
        self._rng = np.random.default_rng(0)
        self.target = LlamaRunner(config.model_path, n_ctx=config.n_ctx, n_slots=config.n_slots,
                                  n_threads=threads, n_batch=config.n_batch, kv_type=config.kv_type,
                                  kernels=config.cpu_kernels)
        backend = self.target.cpu_backend
        log.info("llama.cpp CPU kernels: %s (%s, asked for %s); AMX tile state: %s", backend.path, backend.variant,
                 backend.requested, backend.amx.reason)
        self.pool = KVPool(config.n_slots, config.n_ctx)
        self.disk: PoolDisk | None = None
        if config.kv_disk_dir is not None and config.kv_disk_budget_bytes > 0:
            tier = KVDiskTier(config.kv_disk_dir, config.kv_disk_budget_bytes,
                              kv_fingerprint(config.model_path, config.kv_type))
            self.disk = PoolDisk(tier, self.target)
        self.stats = EngineStats()
        self.prompt_ms_per_token = Ema(PRIOR_PROMPT_MS_PER_TOKEN)
        self._contended_at = -math.inf  # when a live request last waited while another ran
        self.draft: DraftModel | None = None
        self.draft_disabled_reason: str | None = None
        if config.draft_model_path is not None:
            try:
                self.draft = DraftModel(LlamaRunner(config.draft_model_path, n_ctx=config.draft_n_ctx, n_slots=1,
                                                    n_threads=threads, n_batch=config.n_batch,
                                                    kv_type=config.kv_type, kernels=config.cpu_kernels))
                if self.draft.runner.n_vocab != self.target.n_vocab:
                    raise ValueError(f"draft vocabulary {self.draft.runner.n_vocab} != target {self.target.n_vocab}")
            except Exception as exc:  # a draft model is optional: degrade to n-gram/no speculation
                self._disable_draft(f"draft model failed to load: {exc}")
        self.policy = SpeculationPolicy(draft_available=self.draft is not None)

    def save_pool(self) -> int:
        """Keep every file's KV on disk (at shutdown); returns the files written."""
        if self.disk is None:
            return 0
        with self._lock:
            written = self.disk.save(self.pool.slots)
        self.disk.writes_done()
        return written

    def tokenize(self, text: str, markers: Sequence[int] | None = None) -> list[int]:
        return self.target.tokenize(text, markers)

    def status(self) -> dict[str, Any]:
        """For `ctxpress status` and the metrics: pool occupancy, speculation, degradations."""
        return {
            "kv_type": self.config.kv_type,
            "cpu_kernels": self.target.cpu_backend.summary(),
            "kv_cells": self.pool.cells_per_slot * len(self.pool.slots),
            "kv_cells_used": self.pool.used_cells(),
            "kv_slots": [{"key": s.key, "tokens": len(s.tokens)} for s in self.pool.slots if s.tokens],
            "pool": vars(self.pool.stats),
            "disk": self.disk.status() if self.disk is not None else None,
            "draft_model": self.config.draft_model_path.name if self.draft is not None and
            self.config.draft_model_path else None,
            "draft_disabled_reason": self.draft_disabled_reason,
            "speculation": dict(self.stats.speculation_by_method),
            "draft_proposed": self.stats.draft_proposed,
            "draft_accepted": self.stats.draft_accepted,
            "gave_way": self.stats.gave_way,
            "threads": self.stats.threads,
            "threads_mode": "adaptive" if self.host_load is not None else "fixed",
            "host_other_cores": (round(self.host_load.other_cores, 2)
                                 if self.host_load is not None and self.host_load.other_cores is not None else None),
            "fewer_threads": self.stats.fewer_threads,
            "prompt_ms_per_token": round(self.prompt_ms_per_token.value, 2),
            "policy": self.policy.snapshot(),
        }

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
