"""The engine's side of the KV pool's disk tier (``serving.engine.kv_disk``): an evicted file's KV is copied
out of its sequence and written on a writer thread, and read back into a slot when it gives more of
a prompt than the slot holds; at shutdown every file in the pool is written."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from serving.engine.generation import GenerationFigures
from serving.engine.kv_disk import KVDiskTier
from serving.engine.kv_pool import KVPool, Slot
from serving.engine.llama_runner import LlamaRunner

log = logging.getLogger(__name__)

# A file's KV goes to disk, and comes back from it, only when it saves this many prompt tokens; at
# most this many evicted files wait for the writer (beyond, an eviction is not kept).
DISK_MIN_TOKENS = 64
DISK_MAX_PENDING = 2


def kv_fingerprint(model_path: Path, kv_type: str) -> str:
    """What a saved KV state is valid for: this model file, KV cell type and llama.cpp build."""
    import llama_cpp

    return f"{model_path.name}:{model_path.stat().st_size}:{kv_type}:{llama_cpp.__version__}"


class PoolDisk:
    """The disk tier ``tier`` holding the KV of ``runner``'s sequences. The engine calls it under its
    own lock; only the writes run beside it."""

    def __init__(self, tier: KVDiskTier, runner: LlamaRunner) -> None:
        self.tier = tier
        self._runner = runner
        # one writer: an evicted file's KV is copied out on the engine thread, written beside it
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kv-disk")
        self._write_slots = threading.BoundedSemaphore(DISK_MAX_PENDING)

    def keep(self, key: str, tokens: list[int], seq: int) -> None:
        """Copy the sequence's KV now (before it is trimmed) and write it on the writer thread."""
        if key.startswith("<") or len(tokens) < DISK_MIN_TOKENS:
            return
        if not self._write_slots.acquire(blocking=False):
            log.info("KV of %s not kept on disk: %d writes pending already", key, DISK_MAX_PENDING)
            return
        state = self._runner.seq_state(seq)
        tier = self.tier

        def write() -> None:
            try:
                tier.save(key, tokens, state)
            finally:
                self._write_slots.release()

        self._writer.submit(write)

    def restore(self, key: str | None, tokens: list[int], slot: Slot, reused: int,
                figures: GenerationFigures) -> int:
        """Read the file's KV back from disk when it gives more of the prompt than the slot
        holds now; returns the prompt tokens the slot gives back."""
        if key is None or key.startswith("<"):
            return reused
        if len(tokens) - 1 < reused + DISK_MIN_TOKENS:  # the slot holds nearly all of it: no file to read
            return reused
        stored_tokens = self.tier.tokens_of(key)
        if stored_tokens is None or KVPool.reusable(stored_tokens, tokens) < reused + DISK_MIN_TOKENS:
            return reused
        started = time.perf_counter()
        stored = self.tier.load(key)
        if stored is None:
            return reused
        if not self._runner.set_seq_state(slot.seq_id, stored.blob):
            self.tier.discard(key, "llama.cpp did not accept the saved state")
            slot.tokens = []
            return 0
        slot.tokens = list(stored.tokens)
        gained = KVPool.reusable(stored.tokens, tokens)
        figures.restored_tokens = gained
        figures.restore_ms = (time.perf_counter() - started) * 1000
        self.tier.restored(gained)
        return gained

    def writes_done(self) -> None:
        """Wait until the evicted files queued for the disk tier are written."""
        self._writer.submit(lambda: None).result()

    def save(self, slots: Iterable[Slot]) -> int:
        """Write the KV of every file in ``slots`` now; returns the files written."""
        written = 0
        for slot in slots:
            if slot.key and not slot.key.startswith("<") and len(slot.tokens) >= DISK_MIN_TOKENS:
                self.tier.save(slot.key, list(slot.tokens), self._runner.seq_state(slot.seq_id))
                written += 1
        return written

    def status(self) -> dict[str, Any]:
        files, size = self.tier.usage()
        return {**vars(self.tier.stats), "files": files, "bytes": size, "budget_bytes": self.tier.budget_bytes}
